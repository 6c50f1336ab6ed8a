"""Deleting rows of a place without leaving a survivor that cannot be read.

Two things in a place depend on other rows. A row's stored bytes are
compressed against its base chain (``_chain``), and a channel value can be
an append whose earlier items are in other checkpoints' rows (``_lists``).
So deleting rows (``prune``, ``delete_for_runs``, a checkpoint put again
under its id) is done in one transaction, with the place's row locked, as:

1. every value a surviving checkpoint names is kept as it was: an entry whose
   own row, or a row of its chain of appends, is deleted is stored whole in
   the row that held it, or, if that row goes too, in the first surviving
   checkpoint that names it; an entry no survivor needs is dropped;
2. every surviving row whose dictionary held bytes of a deleted or changed
   row is compressed again, against its surviving chain (its base becomes its
   nearest surviving ancestor);
3. the rows go.

Nothing else is touched, so a prune of an old stretch rewrites the rows of
about 32 KiB after it, not the thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from cairn.integrations.langgraph import _tables as t
from cairn.integrations.langgraph._chain import (
    WINDOW,
    Contexts,
    StoredRow,
    contribution,
    squeeze,
)
from cairn.integrations.langgraph._place import Place
from cairn.integrations.langgraph._reading import Load, Values
from cairn.integrations.langgraph._rows import APPEND, VALUE, CheckpointRecord, Entry, encode
from cairn.store.sqlcore import Tx

Dump = Callable[[Any], tuple[str, bytes]]
ValueKey = tuple[str, str]  # channel, version


def rewrite(
    tx: Tx,
    read: tuple[Place, Mapping[int, bytes]],
    rows: list[StoredRow],
    doomed: set[int],
    coder: tuple[Load, Dump],
) -> Place:
    """Delete the rows ``doomed`` of the place ``read`` (made of ``rows``) and
    keep the rest readable, as the module says; the place that is left."""
    place, raws = read
    survivors = [row for row in rows if row.rid not in doomed]
    changed = _kept_values(place, survivors, doomed, coder)
    new_raws = {row.rid: changed.get(row.rid, raws[row.rid]) for row in survivors}
    bases = {row.rid: row.base for row in rows}
    contexts = Contexts()
    for row in survivors:
        base = _survivor(row.base, bases, doomed)
        contexts.add(row.rid, base, contribution(row.checkpoint, new_raws[row.rid]))
    redo = _tainted(rows, raws, doomed | set(changed))
    number = place.counts.place
    updates = []
    for row in survivors:
        if row.rid in redo:
            base = contexts.bases[row.rid]
            data = squeeze(new_raws[row.rid], contexts.after(base))
            updates.append((base, data, number, row.rid))
    tx.exec_many(t.REWRITE_ROW, updates)
    tx.exec_many(t.DELETE_ROW, [(number, rid) for rid in sorted(doomed)])
    keys = [(row.rid, row.checkpoint) for row in survivors]
    return Place.build(place.counts, keys, new_raws, contexts)


def _survivor(base: int | None, bases: Mapping[int, int | None], doomed: set[int]) -> int | None:
    """The nearest ancestor of a row, along its chain, that is not deleted."""
    while base is not None and base in doomed:
        base = bases[base]
    return base


def _tainted(rows: list[StoredRow], raws: Mapping[int, bytes], points: set[int]) -> set[int]:
    """The surviving rows whose dictionary holds bytes of a row in ``points``, and
    those rows themselves. ``behind[r]`` is how many chain bytes lie between the
    end of row r and the end of the nearest such row on its chain."""
    far = WINDOW * 2
    behind: dict[int, int] = {}
    redo: set[int] = set()
    for row in rows:
        if row.rid in points:
            behind[row.rid] = 0
            redo.add(row.rid)
            continue
        base_behind = far if row.base is None else behind.get(row.base, far)
        if base_behind < WINDOW:
            redo.add(row.rid)
        added = len(contribution(row.checkpoint, raws[row.rid]))
        behind[row.rid] = min(far, base_behind + added)
    return redo


def _kept_values(
    place: Place, survivors: list[StoredRow], doomed: set[int], coder: tuple[Load, Dump]
) -> dict[int, bytes]:
    """The new raw bytes of the surviving checkpoint rows whose entries change so
    that every value a survivor names reads as before (step 1 of the module)."""
    load, dump = coder
    intact = _Intact(place, doomed)
    named = _named(place, survivors, load)
    carriers = _carriers(place, named, intact, doomed)
    before = Values(place, ("", ""), None, load)
    changed: dict[int, bytes] = {}
    for row in survivors:
        record = place.record(row.rid)
        if not isinstance(record, CheckpointRecord):
            continue
        mine = [key for key, carrier in carriers.items() if carrier == row.rid]
        kept = tuple(e for e in record.entries if intact((e.channel, e.version)))
        whole = tuple(Entry(c, v, VALUE, None, dump(before.value(c, v))) for c, v in mine)
        if kept + whole != record.entries:
            changed[row.rid] = encode(record._replace(entries=kept + whole))
    return changed


def _named(place: Place, survivors: Iterable[StoredRow], load: Load) -> dict[int, set[ValueKey]]:
    """The stored values each surviving checkpoint names (its channel versions)."""
    named: dict[int, set[ValueKey]] = {}
    for row in survivors:
        record = place.record(row.rid)
        if isinstance(record, CheckpointRecord):
            versions = load(record.body).get("channel_versions", {})
            found = {(channel, str(version)) for channel, version in versions.items()}
            named[row.rid] = {key for key in found if key in place.homes}
    return named


def _carriers(
    place: Place, named: Mapping[int, set[ValueKey]], intact: _Intact, doomed: set[int]
) -> dict[ValueKey, int]:
    """Which surviving row stores each named value that is not intact: the row
    that held it if it survives, else the first survivor that names it."""
    carriers: dict[ValueKey, int] = {}
    for rid in sorted(named):
        for key in named[rid]:
            if key in carriers or intact(key):
                continue
            home = place.homes.get(key)
            carriers[key] = home if home is not None and home not in doomed else rid
    return carriers


class _Intact:
    """Whether a stored value survives as it is: its entry's row is not deleted,
    nor any row along its chain of appends (remembered per value)."""

    def __init__(self, place: Place, doomed: set[int]) -> None:
        self._place, self._doomed = place, doomed
        self._known: dict[ValueKey, bool] = {}

    def __call__(self, key: ValueKey) -> bool:
        path: list[ValueKey] = []
        cursor: ValueKey | None = key
        answer = False
        while cursor is not None:
            if cursor in self._known:
                answer = self._known[cursor]
                break
            home = self._place.homes.get(cursor)
            if home is None or home in self._doomed or cursor in path:
                break
            path.append(cursor)
            entry = self._place.entry(cursor)
            if entry is None:
                break
            if entry.kind != APPEND:
                answer = True
                break
            cursor = (cursor[0], entry.base or "")
        for step in path:
            self._known[step] = answer
        return answer
