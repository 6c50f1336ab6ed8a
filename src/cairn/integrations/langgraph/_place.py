"""One thread namespace (a *place*) decoded in memory, and the saver's cache of them.

A place's rows depend on one another (``_chain``), so the saver reads a place
whole, once: one query, one decompression per row. What it keeps is enough to
answer ``get_tuple`` and to write the next row without reading anything back:
every row's record, the checkpoints and writes by checkpoint id, each
channel version's entry, and the chain's last bytes after the newest row (the
next row's dictionary). The place's row in ``cairn_lg_places`` counts every
change (``changes``) and every deletion or rewrite (``gen``); a cached place
whose counts are the stored ones is current, and one whose ``gen`` is is
still a valid base for the next row (its rows all exist, unchanged).
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
    writes_key,
)

_CACHED_PLACES = 512  # places kept, least recently used dropped first
_CACHED_BYTES = 128 * 1024 * 1024  # ... and fewer, while they hold more raw bytes than this
_LOCKS = 64  # the threads using one place take the same one of these

Key = tuple[str, str]  # thread id, checkpoint namespace


class Counts(NamedTuple):
    """A place's row in ``cairn_lg_places``: its number and change counters."""

    place: int
    changes: int
    gen: int


class Place:
    """The decoded rows of one place, as of ``counts``."""

    def __init__(self, counts: Counts) -> None:
        self.counts = counts
        self.records: dict[int, Record | bytes] = {}  # a writes row: its bytes until read
        self.checkpoints: dict[str, int] = {}  # checkpoint id -> its row
        self.ids: dict[int, str] = {}  # ... and back
        self.writes: dict[str, list[int]] = {}  # checkpoint id -> its writes rows
        self.tasks: dict[tuple[str, str], list[int]] = {}  # (checkpoint id, task) -> ...
        self.values: dict[tuple[str, str], Entry] = {}  # the first stored entry wins
        self.homes: dict[tuple[str, str], int] = {}  # ... and the row that holds it
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
        number order), whose raw bytes and chain are known."""
        place = cls(counts)
        for rid, checkpoint in keys:
            raw = raws[rid]
            place.index(
                rid, checkpoint, decode(raw, checkpoint=True) if checkpoint else raw, len(raw)
            )
            place.tip = rid
        place.context = contexts.after(place.tip)
        return place

    def index(self, rid: int, checkpoint: str | None, record: Record | bytes, size: int) -> None:
        """Take in a row (of a higher number than any it has): a checkpoint row's
        record; a writes row's record, or its bytes, decoded when first read (a
        thread read afresh needs only the newest checkpoint's writes)."""
        self.records[rid] = record
        self.size += size
        if isinstance(record, CheckpointRecord):
            assert checkpoint is not None
            self.checkpoints.setdefault(checkpoint, rid)
            self.ids[rid] = checkpoint
            if self.latest is None or checkpoint > self.latest:
                self.latest = checkpoint
            for entry in record.entries:
                if (entry.channel, entry.version) not in self.values:
                    self.values[(entry.channel, entry.version)] = entry
                    self.homes[(entry.channel, entry.version)] = rid
        else:
            of = (record.checkpoint, record.task) if isinstance(record, WritesRecord) else None
            checkpoint_id, task = of or writes_key(record)  # type: ignore[arg-type]
            self.writes.setdefault(checkpoint_id, []).append(rid)
            self.tasks.setdefault((checkpoint_id, task), []).append(rid)

    def written(
        self, rid: int, checkpoint: str | None, record: Record, raw: bytes, counts: Counts
    ) -> None:
        """Take in the row this process just wrote (after ``tip``, as its base)."""
        self.index(rid, checkpoint, record, len(raw))
        self.tip = rid
        self.context = grow(self.context, contribution(checkpoint, raw))
        self.counts = counts

    def record(self, rid: int) -> Record:
        """Row ``rid``'s record (a writes row decoded now if it was not yet)."""
        found = self.records[rid]
        if isinstance(found, bytes):
            found = self.records[rid] = decode(found, checkpoint=False)
        return found

    def checkpoint(self, checkpoint_id: str) -> CheckpointRecord | None:
        rid = self.checkpoints.get(checkpoint_id)
        found = None if rid is None else self.records[rid]
        return found if isinstance(found, CheckpointRecord) else None

    def writes_of(self, checkpoint_id: str, task: str | None = None) -> Iterator[WritesRecord]:
        """The writes rows of a checkpoint (of one of its tasks), oldest first."""
        rids = (
            self.writes.get(checkpoint_id, ())
            if task is None
            else self.tasks.get((checkpoint_id, task), ())
        )
        for rid in rids:
            record = self.record(rid)
            assert isinstance(record, WritesRecord)
            yield record


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
        with self._lock:
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
