"""Removing and copying a thread's checkpoints: ``delete_thread``,
``delete_for_runs``, ``copy_thread`` and ``prune``, each one transaction.

Each takes the row of every place it changes in ``cairn_lg_places`` first
(``gen`` counts the change, so a saver that cached the place reads it again
before writing after it), then reads the place whole and deletes through
``_rewrite``, which keeps every surviving row readable.
"""

from __future__ import annotations

from collections.abc import Sequence

from cairn.integrations.langgraph import _tables as t
from cairn.integrations.langgraph._chain import StoredRow, id_key, id_text
from cairn.integrations.langgraph._copying import merged_rows
from cairn.integrations.langgraph._place import Counts, Place
from cairn.integrations.langgraph._reading import Load
from cairn.integrations.langgraph._rewrite import Dump, rewrite
from cairn.store.sqlcore import Tx

STRATEGIES = ("keep_latest", "delete")
Coder = tuple[Load, Dump]


def stored_rows(tx: Tx, place: int) -> list[StoredRow]:
    """The rows of a place, in number order."""
    return [
        StoredRow(rid, None if key is None else id_text(key), base, bytes(data))
        for rid, key, base, data in tx.exec(t.ROWS_OF, (place,)).rows
    ]


def delete_thread(tx: Tx, thread: str) -> None:
    """Every row of ``thread``, and its places."""
    tx.exec(t.TAKE_THREAD, (thread,))
    for statement in t.DELETE_THREAD:
        tx.exec(statement, (thread,))


def keep_latest(tx: Tx, thread: str, coder: Coder) -> None:
    """Delete every checkpoint of ``thread`` but the newest of each namespace, and
    the writes of checkpoints older than it; the newest keeps its values whole."""
    for place_id, gen in tx.exec(t.TAKE_THREAD, (thread,)).rows:
        rows = stored_rows(tx, place_id)
        read = Place.read(Counts(place_id, gen, 0), rows)
        place = read[0]
        newest = place.latest
        if newest is None:
            continue
        doomed = {rid for cid, rid in place.checkpoints.items() if cid != newest}
        doomed |= {rid for cid, rids in place.writes.items() if cid < newest for rid in rids}
        if doomed:
            rewrite(tx, read, rows, doomed, coder)


def delete_runs(tx: Tx, run_ids: frozenset[str], coder: Coder) -> set[str]:
    """Delete every checkpoint whose metadata names one of ``run_ids``, with its
    writes; the threads touched. A run id is inside each checkpoint's
    metadata, so every place is read."""
    touched: set[str] = set()
    if not run_ids:
        return touched
    for thread, ns in tx.exec(t.ALL_PLACES).rows:
        found = tx.exec(t.PLACE_COUNTS, (thread, ns)).rows
        if not found or not _runs_in(tx, int(found[0][0]), run_ids, coder[0]):
            continue
        place_id, gen = tx.exec(t.TAKE_ONE, (found[0][0],)).rows[0]
        rows = stored_rows(tx, place_id)  # again, now that the place is locked
        read = Place.read(Counts(place_id, gen, 0), rows)
        doomed = _run_rows(read[0], run_ids, coder[0])
        if doomed:
            rewrite(tx, read, rows, doomed, coder)
            touched.add(str(thread))
    return touched


def _runs_in(tx: Tx, place_id: int, run_ids: frozenset[str], load: Load) -> bool:
    place, _ = Place.read(Counts(place_id, 0, 0), stored_rows(tx, place_id))
    return bool(_run_rows(place, run_ids, load))


def _run_rows(place: Place, run_ids: frozenset[str], load: Load) -> set[int]:
    """The rows of the checkpoints of ``run_ids`` in ``place``, and their writes."""
    doomed: set[int] = set()
    for checkpoint_id, rid in place.checkpoints.items():
        record = place.checkpoint(checkpoint_id)
        metadata = None if record is None else load(record.metadata)
        if isinstance(metadata, dict) and metadata.get("run_id") in run_ids:
            doomed.add(rid)
            doomed.update(place.writes.of(checkpoint_id))
    return doomed


def copy_thread(tx: Tx, source: str, target: str, coder: Coder) -> None:
    """Every checkpoint and write of ``source`` again under ``target``. Into an
    empty namespace the rows are copied as they are; into one that has
    checkpoints, those it lacks are added after its own (its rows stay)."""
    for _, ns in tx.exec(t.THREAD_PLACES, (source,)).rows:
        found = tx.exec(t.PLACE_COUNTS, (source, ns)).rows
        if not found:
            continue
        rows = stored_rows(tx, int(found[0][0]))
        place_id, gen = _take_place(tx, target, ns)
        own = stored_rows(tx, place_id)
        if not own:
            insert_rows(tx, place_id, rows, {row.rid: row.base for row in rows})
            continue
        mine = Place.read(Counts(place_id, gen, 0), own)[0]
        theirs = Place.read(Counts(0, 0, 0), rows)
        added = merged_rows(mine, theirs, coder)
        insert_rows(tx, place_id, added, {row.rid: row.base for row in added})


def _take_place(tx: Tx, thread: str, ns: str) -> tuple[int, int]:
    """The number and new ``gen`` of a place, made if missing, locked."""
    tx.exec(t.NEW_PLACE, (thread, ns))
    number = tx.exec(t.PLACE_COUNTS, (thread, ns)).rows[0][0]
    found = tx.exec(t.TAKE_ONE, (number,)).rows[0]
    return int(found[0]), int(found[1])


def insert_rows(
    tx: Tx, place: int, rows: Sequence[StoredRow], bases: dict[int, int | None]
) -> None:
    """Insert ``rows`` (in order) into ``place``: each gets a new number, and its
    base, if one of ``rows``, that row's new number (else it stays)."""
    if not rows:
        return
    last = tx.exec(t.LAST_ROW, (place,)).rows
    before = last[0][0] if last and last[0][0] is not None else -1
    keys = [None if row.checkpoint is None else id_key(row.checkpoint) for row in rows]
    tx.exec_many(
        t.INSERT_ROWS, [(place, None, k, row.data) for k, row in zip(keys, rows, strict=True)]
    )
    numbers = [rid for (rid,) in tx.exec(t.ROWS_AFTER, (place, before)).rows]
    renumbered = dict(zip((row.rid for row in rows), numbers, strict=True))
    links = []
    for row in rows:
        base = bases[row.rid]
        if base is not None:
            links.append((renumbered.get(base, base), place, renumbered[row.rid]))
    tx.exec_many(t.SET_BASE, links)
