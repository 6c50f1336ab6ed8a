"""Format 1 tables (a row per checkpoint, per channel version and per write)
become format 3 rows, in the transaction that opens them.

Each thread namespace is read whole and written again as format 3 writes it:
its checkpoints in id order, each with the entries of the channel versions it
is the first to name, and after each checkpoint its writes, one row per task.
A value and an append whose base is already stored keep their serialized
bytes; an append whose base is not (its checkpoints were pruned) is rebuilt
and stored whole. Channel versions no checkpoint names are not carried over:
nothing could read them. The format 1 tables are then dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import groupby
from typing import Any

from cairn.integrations.langgraph._chain import chained
from cairn.integrations.langgraph._housekeeping import insert_rows
from cairn.integrations.langgraph._lists import Stored, rebuild
from cairn.integrations.langgraph._packing import unknown_tag, unpack
from cairn.integrations.langgraph._rows import (
    APPEND,
    VALUE,
    CheckpointRecord,
    Entry,
    Write,
    WritesRecord,
    encode,
)
from cairn.store.sqlcore import Tx

Load = Callable[[tuple[str, bytes]], Any]
Dump = Callable[[Any], tuple[str, bytes]]
Blob = tuple[str, str | None, tuple[str, bytes]]  # kind, base, (tag, data)

_PLACES = (
    "SELECT thread_id, checkpoint_ns FROM cairn_lg_checkpoints"
    " UNION SELECT thread_id, checkpoint_ns FROM cairn_lg_writes"
)
_CHECKPOINTS = (
    "SELECT checkpoint_id, parent_id, type, checkpoint, metadata_type, metadata"
    " FROM cairn_lg_checkpoints WHERE thread_id = ? AND checkpoint_ns = ?"
)
_BLOBS = (
    "SELECT channel, version, kind, base, type, data FROM cairn_lg_blobs"
    " WHERE thread_id = ? AND checkpoint_ns = ?"
)
_WRITES = (
    "SELECT checkpoint_id, task_id, idx, channel, type, data, task_path FROM cairn_lg_writes"
    " WHERE thread_id = ? AND checkpoint_ns = ?"
)
_NEW_PLACE = (
    "INSERT INTO cairn_lg_places (thread_id, checkpoint_ns, gen) VALUES (?, ?, 0) RETURNING place"
)
_DROP = (
    "DROP TABLE cairn_lg_checkpoints",
    "DROP TABLE cairn_lg_blobs",
    "DROP TABLE cairn_lg_writes",
)


def upgrade(tx: Tx, coder: tuple[Load, Dump]) -> None:
    """Every format 1 thread namespace as format 3 rows; then no format 1 table."""
    for thread, ns in tx.exec(_PLACES).rows:
        rows = _place_rows(tx, (thread, ns), coder)
        place = tx.exec(_NEW_PLACE, (thread, ns)).rows[0][0]
        stored = chained(rows, None, b"")
        insert_rows(tx, place, stored, {row.rid: row.base for row in stored})
    for statement in _DROP:
        tx.exec(statement)


def _place_rows(
    tx: Tx, where: tuple[str, str], coder: tuple[Load, Dump]
) -> list[tuple[str | None, bytes]]:
    """The format 3 rows of one namespace, raw, in order."""
    blobs: dict[tuple[str, str], Blob] = {
        (channel, version): (kind, base, unpack(str(tag), bytes(data or b"")))
        for channel, version, kind, base, tag, data in tx.exec(_BLOBS, where).rows
        if kind != "empty"
    }
    writes = _writes(tx, where)
    entries = _Entries(blobs, coder)
    rows: list[tuple[str | None, bytes]] = []
    for cid, parent, kind, body, meta_kind, meta in sorted(tx.exec(_CHECKPOINTS, where).rows):
        typed_body = unpack(str(kind), bytes(body))
        record = CheckpointRecord(
            parent or "",
            typed_body,
            unpack(str(meta_kind), bytes(meta)),
            entries.named(coder[0](typed_body).get("channel_versions", {})),
        )
        rows.append((str(cid), encode(record)))
        rows.extend((None, encode(w)) for w in writes.pop(str(cid), []))
    rows.extend((None, encode(w)) for left in writes.values() for w in left)
    return rows


def _writes(tx: Tx, where: tuple[str, str]) -> dict[str, list[WritesRecord]]:
    """Each checkpoint's writes, one record per task, in LangGraph's order."""
    found: dict[str, list[WritesRecord]] = {}
    rows = sorted(tx.exec(_WRITES, where).rows, key=lambda r: (r[0], r[6], r[1], r[2]))
    for (cid, task, path), group in groupby(rows, key=lambda r: (r[0], r[1], r[6])):
        writes = tuple(
            Write(int(idx), str(channel), unpack(str(tag), bytes(data)))
            for _, _, idx, channel, tag, data, _ in group
        )
        found.setdefault(str(cid), []).append(WritesRecord(str(cid), str(task), str(path), writes))
    return found


class _Entries:
    """The entries of each checkpoint, each channel version stored once."""

    def __init__(self, blobs: dict[tuple[str, str], Blob], coder: tuple[Load, Dump]) -> None:
        self._blobs, (self._load, self._dump) = blobs, coder
        self._stored: set[tuple[str, str]] = set()
        self._memo: dict[str, dict[str, tuple[list[Any], int]]] = {}

    def named(self, versions: dict[str, Any]) -> tuple[Entry, ...]:
        """The entries for the versions ``versions`` names that are not stored yet."""
        found: list[Entry] = []
        for channel, raw_version in versions.items():
            key = (channel, str(raw_version))
            blob = self._blobs.get(key)
            if key in self._stored or blob is None:
                continue
            kind, base, typed = blob
            if kind == "value":
                found.append(Entry(*key, VALUE, None, typed))
            elif kind == "append" and (channel, str(base)) in self._stored:
                found.append(Entry(*key, APPEND, str(base), typed))
            elif kind == "append":
                found.append(Entry(*key, VALUE, None, self._dump(self._whole(*key))))
            else:
                raise unknown_tag(str(kind))
            self._stored.add(key)
        return tuple(found)

    def _whole(self, channel: str, version: str) -> list[Any]:
        def lookup(at: str) -> Stored | None:
            blob = self._blobs.get((channel, at))
            if blob is None:
                return None
            return Stored(blob[0], blob[1], self._load(blob[2]))

        return rebuild(version, lookup, self._memo.setdefault(channel, {}))
