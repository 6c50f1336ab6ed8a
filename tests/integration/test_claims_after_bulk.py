"""After a bulk change of the tasks table, PostgreSQL's planner knows it at once.

Cancelling a batch of 100,000 pending tasks leaves the planner's statistics
saying they are pending until autovacuum's next analyze (a minute or more), and
the claims of the drain that follows are planned for a table that is not there
(bench/drain_after_cancel.py measures that drain). The store refreshes them
itself (``ANALYZE tasks``) after a change of at least ``BULK_CHANGE_ROWS`` task
rows, and not after a small one.
Autovacuum is switched off on the test's table, so only the store can have done it.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cairn.store import open_store
from cairn.store.records import NewTask
from cairn.store.sqlbase import SQLStore
from cairn.store.sqlcore import BULK_CHANGE_ROWS

NOW = datetime(2026, 12, 7, 21, 0, tzinfo=UTC)


def _pending_batch(store: SQLStore, batch: str, count: int) -> None:
    store.ensure_batch(batch, "job", NOW)
    tasks = [
        NewTask(
            id=f"{batch}/{n}", name="job", args="{}", codec="json", batch=batch, item_key=str(n)
        )
        for n in range(count)
    ]
    store.enqueue(tasks, NOW)


def _status_values_the_planner_knows(store: SQLStore) -> set[str]:
    rows = store._exec(
        "SELECT most_common_vals::text FROM pg_stats "
        "WHERE tablename = 'tasks' AND attname = 'status'"
    ).rows
    if not rows or rows[0][0] is None:
        return set()
    return set(str(rows[0][0]).strip("{}").split(","))


@pytest.fixture
def store(pg_url: str) -> SQLStore:
    """A PostgreSQL store whose tasks table autovacuum leaves alone, with statistics
    taken while every task of batch ``big`` is pending."""
    opened = open_store(pg_url)
    assert isinstance(opened, SQLStore)
    opened._exec("ALTER TABLE tasks SET (autovacuum_enabled = false)")
    _pending_batch(opened, "big", BULK_CHANGE_ROWS + 200)
    _pending_batch(opened, "small", 10)
    opened._exec("ANALYZE tasks")
    assert _status_values_the_planner_knows(opened) == {"pending"}
    return opened


def test_cancelling_a_big_batch_refreshes_the_planners_statistics(store: SQLStore) -> None:
    """A cancel of 1,200 pending tasks: the statistics say cancelled at once."""
    try:
        assert len(store.cancel_batch("big", "pending", NOW)) == BULK_CHANGE_ROWS + 200
        assert "cancelled" in _status_values_the_planner_knows(store)
    finally:
        store.close()


def test_a_small_change_leaves_the_statistics_to_autovacuum(store: SQLStore) -> None:
    """A cancel of 10 tasks costs no ANALYZE: the statistics are as they were."""
    try:
        assert len(store.cancel_batch("small", "pending", NOW)) == 10
        assert _status_values_the_planner_knows(store) == {"pending"}
    finally:
        store.close()


def test_pruning_a_big_batch_refreshes_them_too(store: SQLStore) -> None:
    """Deleting the big batch (what `cairn prune` does): the planner no longer
    counts its rows."""
    try:
        store.delete_batch("big")
        rows = store._exec("SELECT reltuples FROM pg_class WHERE relname = 'tasks'").rows
        assert float(rows[0][0]) < 100
    finally:
        store.close()
