"""What one stored row holds, as bytes before compression (format 3).

A thread's namespace is stored as rows of two kinds:

* a **checkpoint row**, one per ``put``: the parent's id, the checkpoint's
  body (versions, seen versions, timestamp, ...; not its values), its
  metadata, and an *entry* for each channel value that changed in it: the
  value whole, or, for a list channel, the items appended to an earlier
  version (``_lists``);
* a **writes row**, one per ``put_writes`` call: the checkpoint and task it
  belongs to, the task's path, and its writes.

Every value is kept as the serializer's ``(tag, bytes)``, so the saver's
``serde`` decides what a value is, as in LangGraph's own savers. A row is a
run of fields, each a varint length and that many bytes: text as UTF-8 with
``surrogatepass`` (any Python string round-trips), a write's index as its
decimal text. A checkpoint row is its parent, body and metadata (5 fields),
then 6 per entry (channel, version, kind, base, tag, data); a writes row its
checkpoint, task and path, then 4 per write (index, channel, tag, data). So
reading a row is one pass that cuts fields, with no nesting to follow.
"""

from __future__ import annotations

from typing import NamedTuple

from cairn.integrations.langgraph._packing import CheckpointFormatError

Typed = tuple[str, bytes]  # a serializer's (tag, data)
VALUE, APPEND = "V", "A"  # an entry's kind: the whole value, or items appended to ``base``


class Entry(NamedTuple):
    """One channel's value at one version, as a checkpoint row stores it."""

    channel: str
    version: str
    kind: str  # VALUE or APPEND
    base: str | None  # the version an APPEND extends
    typed: Typed


class CheckpointRecord(NamedTuple):
    parent: str  # "" for none
    body: Typed
    metadata: Typed
    entries: tuple[Entry, ...]


class Write(NamedTuple):
    idx: int
    channel: str
    typed: Typed


class WritesRecord(NamedTuple):
    checkpoint: str
    task: str
    path: str
    writes: tuple[Write, ...]

    def replaces(self) -> bool:
        """Whether these writes replace the task's stored ones (a batch of special
        writes only: an error, an interrupt, ...) rather than add to them (first
        write of an index wins), as LangGraph's PostgresSaver and cairn's format 1."""
        return all(write.idx < 0 for write in self.writes)


Record = CheckpointRecord | WritesRecord


# -- encoding ----------------------------------------------------------------------------------
def encode(record: Record) -> bytes:
    """The record's bytes."""
    fields: list[str | bytes] = []
    if isinstance(record, CheckpointRecord):
        fields += [record.parent, *record.body, *record.metadata]
        for e in record.entries:
            fields += [e.channel, e.version, e.kind, e.base or "", *e.typed]
    else:
        fields += [record.checkpoint, record.task, record.path]
        for w in record.writes:
            fields += [str(w.idx), w.channel, *w.typed]
    out = bytearray()
    for field in fields:
        data = field.encode("utf-8", "surrogatepass") if isinstance(field, str) else field
        size = len(data)
        while size >= 0x80:
            out.append((size & 0x7F) | 0x80)
            size >>= 7
        out.append(size)
        out += data
    return bytes(out)


# -- decoding ----------------------------------------------------------------------------------
def decode(raw: bytes, *, checkpoint: bool) -> Record:
    """The record ``encode`` made of ``raw`` (a checkpoint row's or a writes row's)."""
    try:
        fields = _fields(raw)
        return _checkpoint(fields) if checkpoint else _writes(fields)
    except (IndexError, UnicodeDecodeError, ValueError) as exc:
        raise _damaged() from exc


def _fields(raw: bytes) -> list[bytes]:
    fields: list[bytes] = []
    at, end = 0, len(raw)
    while at < end:
        size = raw[at]
        at += 1
        if size >= 0x80:
            size &= 0x7F
            shift = 7
            while True:
                byte = raw[at]
                at += 1
                size |= (byte & 0x7F) << shift
                if byte < 0x80:
                    break
                shift += 7
        if at + size > end:
            raise ValueError("a field runs past the row")
        fields.append(raw[at : at + size])
        at += size
    return fields


def entry_keys(raw: bytes) -> list[tuple[str, str]]:
    """The (channel, version) of each entry of a checkpoint row, without the rest."""
    try:
        fields = _fields(raw)
        if len(fields) < 5 or (len(fields) - 5) % 6:
            raise ValueError("not a checkpoint row")
        return [(_text(fields[at]), _text(fields[at + 1])) for at in range(5, len(fields), 6)]
    except (IndexError, UnicodeDecodeError, ValueError) as exc:
        raise _damaged() from exc


def entry_of(raw: bytes, key: tuple[str, str]) -> Entry | None:
    """The entry of a checkpoint row for (channel, version), without the rest."""
    try:
        fields = _fields(raw)
        channel, version = (part.encode("utf-8", "surrogatepass") for part in key)
        for at in range(5, len(fields) - 5, 6):
            if fields[at] == channel and fields[at + 1] == version:
                return _checkpoint([b"", b"", b"", b"", b"", *fields[at : at + 6]]).entries[0]
        return None
    except (IndexError, UnicodeDecodeError, ValueError) as exc:
        raise _damaged() from exc


def writes_key(raw: bytes) -> tuple[str, str]:
    """The checkpoint and task of a writes row (its first fields), without the rest."""
    try:
        first = raw[0]
        second = raw[1 + first] if first < 0x80 else 0x80
        if second >= 0x80:
            record = _writes(_fields(raw))
            return record.checkpoint, record.task
        start = 2 + first
        return _text(raw[1 : 1 + first]), _text(raw[start : start + second])
    except (IndexError, UnicodeDecodeError, ValueError) as exc:
        raise _damaged() from exc


def _text(data: bytes) -> str:
    return data.decode("utf-8", "surrogatepass")


def _checkpoint(fields: list[bytes]) -> CheckpointRecord:
    if len(fields) < 5 or (len(fields) - 5) % 6:
        raise ValueError("not a checkpoint row")
    entries = []
    for at in range(5, len(fields), 6):
        channel, version, kind, base, tag, data = fields[at : at + 6]
        if kind == b"V":
            entry = Entry(_text(channel), _text(version), VALUE, None, (_text(tag), data))
        elif kind == b"A":
            entry = Entry(_text(channel), _text(version), APPEND, _text(base), (_text(tag), data))
        else:
            raise ValueError("an entry of an unknown kind")
        entries.append(entry)
    parent, body_tag, body, meta_tag, meta = fields[:5]
    return CheckpointRecord(
        _text(parent), (_text(body_tag), body), (_text(meta_tag), meta), tuple(entries)
    )


def _writes(fields: list[bytes]) -> WritesRecord:
    if len(fields) < 3 or (len(fields) - 3) % 4:
        raise ValueError("not a writes row")
    writes = tuple(
        Write(int(fields[at]), _text(fields[at + 1]), (_text(fields[at + 2]), fields[at + 3]))
        for at in range(3, len(fields), 4)
    )
    return WritesRecord(_text(fields[0]), _text(fields[1]), _text(fields[2]), writes)


def _damaged() -> CheckpointFormatError:
    return CheckpointFormatError(
        "a stored LangGraph row does not decode as format 3: it was written by "
        "another cairn or changed by hand. Upgrade cairn "
        "(`pip install -U 'cairn-durable[langgraph]'`) if a newer one wrote it. "
        "Nothing was changed."
    )
