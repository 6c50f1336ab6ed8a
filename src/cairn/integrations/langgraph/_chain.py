"""Each row compressed against the rows before it, so each text is stored once.

A user message reaches a saver three times: in the input channel
(``__start__``) of one checkpoint, in the writes of the task that read it, and
in the messages appended to the next checkpoint; a reply twice. Compressed on
its own, each row would hold its own copy. Here a row is compressed (raw
deflate) with a preset dictionary made of the bytes of the rows before it: its
*base*, the base's base, and so on, the last 32 KiB of them, with the fixed
``ZDICT_1`` in front while the chain is shorter. A text already in the chain
then costs a few bytes of back-reference, and the window of earlier turns
helps compress the new text too.

A row names its base (``base``, a row of the same thread and namespace; NULL
for a row that stands alone), so the chain is explicit: a row can be decoded
once its base chain is, and a row's stored bytes depend on exactly the chain
whose last ``WINDOW`` bytes are its dictionary. The uncompressed bytes of a
row never change, so a row stays decodable while its chain is stored: a row
that is deleted or rewritten makes the saver re-encode the rows whose
dictionary held it (``_reencode``).

A checkpoint row adds its checkpoint id (its key, stored outside the
compressed bytes) to the chain before its bytes, so a child's parent id, or a
write's checkpoint id, is a back-reference too.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from typing import NamedTuple
from uuid import UUID

from cairn.integrations.langgraph._packing import ZDICT_1, CheckpointFormatError

WINDOW = 32 * 1024  # deflate's largest window: a dictionary longer than this is not used
_LEVEL = 6
# The first byte of a stored row: how the rest is stored. A row written since
# the checksums (2, 3) has the CRC-32 of its raw bytes next, 4 bytes big-endian,
# checked when it is read: raw deflate has no check of its own, so a row
# changed on disk could otherwise decompress into other values. Rows of the
# first two tags (written before) are read unchecked.
_PLAIN, _DEFLATE, _PLAIN_CHECKED, _DEFLATE_CHECKED = 0, 1, 2, 3
_CRC_BYTES = 4


class StoredRow(NamedTuple):
    """A row as it is stored: its number, its checkpoint id (None: a writes row),
    its base's number, and its bytes."""

    rid: int
    checkpoint: str | None
    base: int | None
    data: bytes


def squeeze(raw: bytes, context: bytes) -> bytes:
    """``raw`` as stored after ``context`` (the chain's last bytes)."""
    packer = zlib.compressobj(_LEVEL, zlib.DEFLATED, -15, zdict=dictionary(context))
    packed = packer.compress(raw) + packer.flush()
    crc = zlib.crc32(raw).to_bytes(_CRC_BYTES, "big")
    if len(packed) < len(raw):
        return b"".join((bytes((_DEFLATE_CHECKED,)), crc, packed))
    return b"".join((bytes((_PLAIN_CHECKED,)), crc, raw))


def unsqueeze(data: bytes, context: bytes) -> bytes:
    """The raw bytes ``squeeze`` stored as ``data`` after ``context``."""
    return inflate(data, dictionary(context))


def inflate(data: bytes, zdict: bytes | memoryview) -> bytes:
    """The raw bytes of a stored row, given its whole dictionary."""
    data = bytes(data)
    tag = data[0] if data else -1
    if tag in (_PLAIN_CHECKED, _DEFLATE_CHECKED):
        return _checked(
            tag - _PLAIN_CHECKED, data[1 + _CRC_BYTES :], data[1 : 1 + _CRC_BYTES], zdict
        )
    return _unchecked(tag, data[1:], zdict)


def _checked(tag: int, body: bytes, crc: bytes, zdict: bytes | memoryview) -> bytes:
    """The raw bytes of a row written with its checksum, found to match it."""
    raw = _unchecked(tag, body, zdict)
    if zlib.crc32(raw).to_bytes(_CRC_BYTES, "big") != crc:
        raise CheckpointFormatError(
            "a stored LangGraph row is corrupt: it does not match the checksum written "
            "with it, so the store was changed on disk (an edit in place, bytes written "
            "over the file, a failing disk), or a row it depends on was. It was not "
            "read back. Restore the store from a backup (`cairn backup` makes one)."
        )
    return raw


def _unchecked(tag: int, body: bytes, zdict: bytes | memoryview) -> bytes:
    """The raw bytes of a row's ``body`` stored under ``tag`` (plain or deflated)."""
    if tag == _PLAIN:
        return body
    if tag != _DEFLATE:
        raise CheckpointFormatError(
            f"a stored LangGraph row is tagged {tag}, a compression this cairn does not "
            "know: it was written by a newer cairn. Upgrade cairn "
            "(`pip install -U 'cairn-durable[langgraph]'`). Nothing was changed."
        )
    unpacker = zlib.decompressobj(-15, zdict=zdict)
    try:
        raw = unpacker.decompress(body) + unpacker.flush()
    except zlib.error as exc:
        raise CheckpointFormatError(
            f"a stored LangGraph row does not decompress ({exc}): it was changed by "
            "hand, or a row it depends on was. Nothing was changed."
        ) from exc
    if not unpacker.eof:
        raise CheckpointFormatError("a stored LangGraph row is cut short. Nothing was changed.")
    return raw


def dictionary(context: bytes) -> bytes:
    if len(context) >= WINDOW:
        return context  # a context is never longer than WINDOW: no copy
    return (ZDICT_1 + context)[-WINDOW:]


def contribution(checkpoint: str | None, raw: bytes) -> bytes:
    """What a row adds to the chain: its checkpoint id (if any), then its bytes."""
    if checkpoint is None:
        return raw
    return checkpoint.encode("utf-8", "surrogatepass") + raw


def grow(context: bytes, added: bytes) -> bytes:
    """The chain's last bytes once ``added`` follows ``context``."""
    keep = WINDOW - len(added)
    if keep <= 0:
        return added[-WINDOW:]
    if len(context) > keep:
        return b"".join((memoryview(context)[-keep:], added))
    return context + added


class Contexts:
    """The chain's last bytes before any row, from every row's base and
    contribution (rows of one place, decoded or about to be written)."""

    def __init__(self) -> None:
        self.bases: dict[int, int | None] = {}
        self.added: dict[int, bytes] = {}
        self._last: tuple[int, bytes] | None = None  # the last context asked for

    def add(self, rid: int, base: int | None, added: bytes) -> None:
        self.bases[rid], self.added[rid] = base, added

    def after(self, rid: int | None) -> bytes:
        """The context of a row whose base is ``rid`` (b"" for none)."""
        if rid is None:
            return b""
        last = self._last
        if last is not None and last[0] == self.bases.get(rid):
            found = grow(last[1], self.added[rid])  # the common case: a straight chain
        else:
            found = self._walk(rid)
        self._last = (rid, found)
        return found

    def _walk(self, rid: int) -> bytes:
        parts: list[bytes] = []
        size = 0
        cursor: int | None = rid
        while cursor is not None and size < WINDOW:
            added = self.added[cursor]
            parts.append(added)
            size += len(added)
            cursor = self.bases[cursor]
        return b"".join(reversed(parts))[-WINDOW:]


def decode_rows(rows: Iterable[StoredRow]) -> tuple[dict[int, bytes], Contexts]:
    """The raw bytes of every row of one place (given in ``rid`` order), and the
    chain they make. A row whose base is not among them cannot be decoded."""
    raws: dict[int, bytes] = {}
    contexts = Contexts()
    tail = _Tail()
    for row in rows:
        if row.base is not None and row.base not in raws:
            raise CheckpointFormatError(
                f"stored LangGraph row {row.rid} depends on row {row.base}, which is not "
                "stored: the rows were changed outside cairn. Nothing was changed."
            )
        if row.base != tail.rid:  # the first row, a fork, a row rewritten after a deletion
            tail.restart(row.base, b"" if row.base is None else contexts.after(row.base))
        raw = raws[row.rid] = tail.inflate(row.data)
        added = contribution(row.checkpoint, raw)
        contexts.add(row.rid, row.base, added)
        tail.extend(row.rid, added)
    return raws, contexts


class _Tail:
    """The chain up to the last row decoded, ``ZDICT_1`` in front, in one buffer
    that grows: along a straight chain (each row's base the row before it) a
    row's dictionary is a view of its end, not a new 32 KiB copy per row."""

    def __init__(self) -> None:
        self.rid: int | None = None
        self._buffer = bytearray(ZDICT_1)

    def restart(self, rid: int | None, context: bytes) -> None:
        self.rid, self._buffer = rid, bytearray(ZDICT_1 + context)

    def inflate(self, data: bytes) -> bytes:
        # The views are released before the buffer grows again (a bytearray
        # cannot be resized while a view of it is alive).
        with memoryview(self._buffer) as whole, whole[-WINDOW:] as window:
            return inflate(data, window)

    def extend(self, rid: int, added: bytes) -> None:
        self.rid = rid
        self._buffer += added
        if len(self._buffer) > 8 * WINDOW:
            del self._buffer[:-WINDOW]


# -- checkpoint ids as stored keys --------------------------------------------------------------
def id_key(checkpoint_id: str) -> bytes:
    """A checkpoint id as stored: 16 bytes for a canonical UUID (LangGraph's
    uuid6), else its UTF-8, with a 0xFF after it if that is 16 bytes long too
    (0xFF is never part of UTF-8, so the two cannot be confused). Ordering is
    never asked of the stored key: the saver sorts ids as text."""
    if len(checkpoint_id) == 36:
        try:
            parsed = UUID(checkpoint_id)
        except ValueError:
            parsed = None
        if parsed is not None and str(parsed) == checkpoint_id:
            return parsed.bytes
    text = checkpoint_id.encode("utf-8", "surrogatepass")
    return text + b"\xff" if len(text) == 16 else text


def id_text(key: bytes | memoryview) -> str:
    """The checkpoint id ``id_key`` stored as ``key``."""
    key = bytes(key)
    if len(key) == 16:
        hexed = key.hex()  # what str(UUID(bytes=key)) gives, without building a UUID
        return f"{hexed[:8]}-{hexed[8:12]}-{hexed[12:16]}-{hexed[16:20]}-{hexed[20:]}"
    if key.endswith(b"\xff"):
        key = key[:-1]
    return key.decode("utf-8", "surrogatepass")


def chained(
    rows: Iterable[tuple[str | None, bytes]], base: int | None, context: bytes
) -> list[StoredRow]:
    """Rows (checkpoint id or None, raw bytes) stored one after another after row
    ``base`` (whose chain ends in ``context``), numbered -1, -2, ... until they
    are inserted; each one's base is the one before it."""
    stored: list[StoredRow] = []
    for checkpoint, raw in rows:
        number = -len(stored) - 1
        stored.append(StoredRow(number, checkpoint, base, squeeze(raw, context)))
        base, context = number, grow(context, contribution(checkpoint, raw))
    return stored
