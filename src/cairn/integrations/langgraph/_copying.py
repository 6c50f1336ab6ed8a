"""``copy_thread`` into a namespace that already has checkpoints.

The checkpoints the target lacks, and the writes of tasks it has none of, are
added after its own rows, compressed in its chain. A value is read from the
first entry stored for its channel and version, so where both threads store
one the target's stays (as format 1's copy kept the target's rows); an
append whose earlier items the target lacks, and a value a copied checkpoint
names that no copied row holds, are stored whole, so every copied checkpoint
reads as it did in the source.
"""

from __future__ import annotations

from collections.abc import Mapping

from cairn.integrations.langgraph._chain import StoredRow, chained
from cairn.integrations.langgraph._place import Place
from cairn.integrations.langgraph._reading import Load, Values
from cairn.integrations.langgraph._rewrite import Dump
from cairn.integrations.langgraph._rows import (
    APPEND,
    VALUE,
    CheckpointRecord,
    Entry,
    WritesRecord,
    encode,
)


def merged_rows(
    mine: Place, theirs: tuple[Place, Mapping[int, bytes]], coder: tuple[Load, Dump]
) -> list[StoredRow]:
    """The rows to add to ``mine`` from ``theirs``, in order, numbered -1, -2, ...
    (each based on the one before it, the first on ``mine``'s newest row)."""
    source, raws = theirs
    settle = _Settle(mine, source, coder)
    added: list[tuple[str | None, bytes]] = []
    for rid in source.records:
        checkpoint, record = source.ids.get(rid), source.record(rid)
        if isinstance(record, WritesRecord):
            if (record.checkpoint, record.task) not in settle.tasks:
                added.append((None, raws[rid]))
        elif checkpoint not in mine.checkpoints:
            added.append((checkpoint, encode(settle(record))))
    return chained(added, mine.tip, mine.context)


class _Settle:
    """A copied checkpoint's entries as the target needs them."""

    def __init__(self, mine: Place, source: Place, coder: tuple[Load, Dump]) -> None:
        self._source = source
        self._load, self._dump = coder
        self._values = Values(source, ("", ""), None, self._load)
        self._stored = set(mine.homes)  # grows with each copied entry
        self.tasks = {
            (record.checkpoint, record.task)
            for _, rids in mine.writes.items()
            for record in (mine.record(rid) for rid in rids)
            if isinstance(record, WritesRecord)
        }

    def __call__(self, record: CheckpointRecord) -> CheckpointRecord:
        entries: list[Entry] = []
        for entry in record.entries:
            key = (entry.channel, entry.version)
            if key in self._stored:
                continue
            if entry.kind == APPEND and (entry.channel, entry.base) not in self._stored:
                entry = self._whole(key)
            entries.append(entry)
            self._stored.add(key)
        for channel, version in self._load(record.body).get("channel_versions", {}).items():
            key = (channel, str(version))
            if key not in self._stored and key in self._source.homes:
                entries.append(self._whole(key))
                self._stored.add(key)
        return record._replace(entries=tuple(entries))

    def _whole(self, key: tuple[str, str]) -> Entry:
        return Entry(*key, VALUE, None, self._dump(self._values.value(*key)))
