"""One thread namespace (a *place*) decoded in memory, and the saver's cache of them.

A place's rows depend on one another (``_chain``), so the saver reads a place
whole, once: one query, one decompression per row. What it keeps is enough to
answer ``get_tuple`` and to write the next row without reading anything back:
every row's record, the checkpoints and writes by checkpoint id, each
channel version's entry, and the chain's last bytes after the newest row (the
next row's dictionary). The place's row in ``cairn_lg_places`` counts every
deletion or rewrite (``gen``), and its rows are numbered in the order they
commit: a cached place whose ``gen`` and greatest row number are the stored
ones is the stored place.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from typing import NamedTuple

from cairn.integrations.langgraph._chain import (
    Contexts,
    StoredRow,
    contribution,
    decode_rows,
    grow,
)
from cairn.integrations.langgraph._rows import (
    CheckpointRecord,
    Entry,
    Record,
    WritesRecord,
    decode,
    entry_keys,
    entry_of,
    writes_key,
)

_CACHED_PLACES = 512  # places kept, least recently used dropped first
_CACHED_BYTES = 128 * 1024 * 1024  # ... and fewer, while they hold more raw bytes than this
_LOCKS = 64  # the threads using one place take the same one of these

Key = tuple[str, str]  # thread id, checkpoint namespace


class Counts(NamedTuple):
    """Where a place stands: its number, its ``gen`` (deletions and rewrites) and
    its greatest row number (0: none)."""

    place: int
    gen: int
    last: int


class Place:
    """The rows of one place, as of ``counts``: each row's raw bytes, decoded into
    its record when read, and an index of them (a thread read afresh needs
    only its newest checkpoint and the rows its values are in)."""

    def __init__(self, counts: Counts) -> None:
        self.counts = counts
        self.records: dict[int, bytes] = {}  # each row's raw bytes
        self.checkpoints: dict[str, int] = {}  # checkpoint id -> its row
        self.ids: dict[int, str] = {}  # ... and back
        # The index holds strings and ints only, which the garbage collector does
        # not visit: a list or a tuple per row would add thousands of objects per
        # thread to every full collection, in the whole process.
        self.writes = RowLists()  # checkpoint id -> its writes rows
        self.tasks = RowLists()  # checkpoint id NUL task -> its writes rows
        self.homes = Homes()  # (channel, version) -> the row of its first entry
        self.tip: int | None = None  # the newest row: the next row's base
        self.context = b""  # the chain's last bytes after ``tip``
        self.latest: str | None = None  # the greatest checkpoint id, as text
        self.size = 0  # raw bytes decoded

    @classmethod
    def read(cls, counts: Counts, rows: Iterable[StoredRow]) -> tuple[Place, dict[int, bytes]]:
        """The place made of its stored ``rows`` (in ``rid`` order), and each row's
        raw bytes (which only a rewrite needs: the place keeps the records)."""
        rows = list(rows)
        raws, contexts = decode_rows(rows)
        return cls.build(counts, [(row.rid, row.checkpoint) for row in rows], raws, contexts), raws

    @classmethod
    def build(
        cls,
        counts: Counts,
        keys: Iterable[tuple[int, str | None]],
        raws: Mapping[int, bytes],
        contexts: Contexts,
    ) -> Place:
        """The place of the rows ``keys`` names (number and checkpoint id, in
        number order), whose raw bytes and chain are known; its counts are
        ``counts`` with its greatest row number."""
        place = cls(counts)
        for rid, checkpoint in keys:
            place.index(rid, checkpoint, raws[rid])
            place.tip = rid
        place.context = contexts.after(place.tip)
        place.counts = counts._replace(last=place.tip or 0)
        return place

    def index(
        self, rid: int, checkpoint: str | None, raw: bytes, record: Record | None = None
    ) -> None:
        """Take in a row (of a higher number than any it has): its raw bytes, of
        which only the keys are read now (from ``record``, if it is at hand).
        Records are not kept: thousands of small objects per thread would
        lengthen every full pass of the garbage collector, in the whole process."""
        self.records[rid] = raw
        self.size += len(raw)
        if checkpoint is not None:
            self.checkpoints.setdefault(checkpoint, rid)
            self.ids[rid] = checkpoint
            if self.latest is None or checkpoint > self.latest:
                self.latest = checkpoint
            for key in entry_keys(raw) if record is None else row_keys(record):
                self.homes.add(key, rid)
        else:
            checkpoint_id, task = writes_key(raw) if record is None else row_keys(record)[0]
            self.writes.add(checkpoint_id, rid)
            self.tasks.add(_task_slot(checkpoint_id, task), rid)

    def written(self, rid: int, checkpoint: str | None, record: Record, raw: bytes) -> None:
        """Take in the row this process just wrote (after ``tip``, as its base)."""
        self.index(rid, checkpoint, raw, record)
        self.tip = rid
        self.context = grow(self.context, contribution(checkpoint, raw))
        self.counts = self.counts._replace(last=rid)

    def record(self, rid: int) -> Record:
        """Row ``rid``'s record, decoded from its bytes."""
        return decode(self.records[rid], checkpoint=rid in self.ids)

    def checkpoint(self, checkpoint_id: str) -> CheckpointRecord | None:
        rid = self.checkpoints.get(checkpoint_id)
        found = None if rid is None else self.record(rid)
        return found if isinstance(found, CheckpointRecord) else None

    def entry(self, key: tuple[str, str]) -> Entry | None:
        """The entry read for a channel version: the first one stored."""
        rid = self.homes.get(key)
        return None if rid is None else entry_of(self.records[rid], key)

    def writes_of(self, checkpoint_id: str, task: str | None = None) -> Iterator[WritesRecord]:
        """The writes rows of a checkpoint (of one of its tasks), oldest first."""
        if task is None:
            rids = self.writes.of(checkpoint_id)
        else:
            rids = self.tasks.of(_task_slot(checkpoint_id, task))
        for rid in rids:
            record = self.record(rid)
            assert isinstance(record, WritesRecord)
            yield record


class RowLists:
    """Text -> the rows under it, in order, kept as links between row numbers."""

    def __init__(self) -> None:
        self._first: dict[str, int] = {}
        self._last: dict[str, int] = {}
        self._next: dict[int, int] = {}

    def add(self, key: str, rid: int) -> None:
        last = self._last.get(key)
        if last is None:
            self._first[key] = rid
        else:
            self._next[last] = rid
        self._last[key] = rid

    def of(self, key: str) -> list[int]:
        found: list[int] = []
        rid = self._first.get(key)
        while rid is not None:
            found.append(rid)
            rid = self._next.get(rid)
        return found

    def items(self) -> Iterator[tuple[str, list[int]]]:
        for key in self._first:
            yield key, self.of(key)


class Homes:
    """(channel, version) -> the row of its first entry, as one dict of version
    texts per channel."""

    def __init__(self) -> None:
        self._channels: dict[str, dict[str, int]] = {}

    def add(self, key: tuple[str, str], rid: int) -> None:
        """Note ``rid`` as the home of ``key`` unless it has one."""
        self._channels.setdefault(key[0], {}).setdefault(key[1], rid)

    def get(self, key: tuple[str, str]) -> int | None:
        versions = self._channels.get(key[0])
        return None if versions is None else versions.get(key[1])

    def __contains__(self, key: object) -> bool:
        return isinstance(key, tuple) and self.get(key) is not None

    def __iter__(self) -> Iterator[tuple[str, str]]:
        for channel, versions in self._channels.items():
            for version in versions:
                yield channel, version


def _task_slot(checkpoint_id: str, task: str) -> str:
    return f"{checkpoint_id}\x00{task}"  # neither may hold a NUL (check_text)


def row_keys(record: Record) -> list[tuple[str, str]]:
    """A checkpoint record's entry keys, or a writes record's (checkpoint, task)."""
    if isinstance(record, CheckpointRecord):
        return [(entry.channel, entry.version) for entry in record.entries]
    return [(record.checkpoint, record.task)]


class Places:
    """The places this saver has read or written, least recently used dropped."""

    def __init__(self) -> None:
        self._places: OrderedDict[Key, Place] = OrderedDict()
        self._lock = threading.Lock()
        self._users = [threading.RLock() for _ in range(_LOCKS)]

    def lock(self, key: Key) -> threading.RLock:
        """The lock held while a cached place of ``key`` is read, or checked and
        written after (the store's lock on the place row orders processes)."""
        return self._users[hash(key) % _LOCKS]

    def get(self, key: Key) -> Place | None:
        with self._lock:
            place = self._places.get(key)
            if place is not None:
                self._places.move_to_end(key)
            return place

    def keep(self, key: Key, place: Place) -> None:
        """Keep ``place`` as the most recently used; drop the least recently used
        while there are too many, or they hold too many bytes (counted when a
        place is read, not at every row written to one already kept)."""
        with self._lock:
            if self._places.get(key) is place:
                self._places.move_to_end(key)
                return
            self._places[key] = place
            self._places.move_to_end(key)
            size = sum(p.size for p in self._places.values())
            while len(self._places) > 1 and (
                len(self._places) > _CACHED_PLACES or size > _CACHED_BYTES
            ):
                _, dropped = self._places.popitem(last=False)
                size -= dropped.size

    def forget_thread(self, thread_id: str) -> None:
        with self._lock:
            for key in [k for k in self._places if k[0] == thread_id]:
                del self._places[key]
