"""Claims stay flat in history: with 100,000 finished tasks in the store (and
100,000 pending ones enqueued after them), every statement a claim runs reads
claimable rows only.

Checked on the plans, not the clock. On PostgreSQL each statement is run under
``EXPLAIN (ANALYZE, FORMAT JSON)`` (inside a transaction rolled back after), and
no node of the plan may read the table's other rows: no sequential scan, and no
node that filters out more than a handful of rows. On SQLite the claim's plan
must search an index of pending rows (the store names it with INDEXED BY, so
SQLite refuses any other plan), and the virtual machine instructions a claim
runs are counted, which do not depend on the machine's speed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from cairn.store import open_store, sql
from cairn.store.records import NewTask
from cairn.store.sqlbase import SQLStore
from cairn.store.sqlcore import Tx
from cairn.store.sqlite import SQLiteStore
from tests.conftest import postgres_admin_url, with_database

FINISHED = 100_000
PENDING = 100_000
NOW = datetime(2026, 5, 24, 4, 30, tzinfo=UTC)
LEASE_UNTIL = NOW + timedelta(seconds=30)
LAPSED_BEFORE = NOW - timedelta(seconds=12)
# Rows a plan node may filter out without walking the history: the few pending
# and running rows of other batches or task names this store holds.
FEW = 10
# (tasks_pending_fair, schema 12, is one too: PostgreSQL's planner may take it
# for a batch's claim when that batch holds nearly every pending row.)
PENDING_INDEXES = {"tasks_pending", "tasks_pending_by_batch", "tasks_pending_fair"}
# The partial indexes of claimable rows: scanning one of them reads no history.
PARTIAL_INDEXES = {*PENDING_INDEXES, "tasks_running_by_lease", "tasks_by_owner", "tasks_waking"}


def _fill(store: SQLStore, finished: int, pending: int = 3) -> None:
    """``finished`` completed tasks in batch ``b``, then ``pending`` pending ones
    after them (so walking the tasks in enqueue order meets every finished one
    first), two pending of another task in batch ``c``, and two running tasks:
    one whose lease expired long ago and one whose lease is valid."""
    stamp = store._ts(NOW)
    store.ensure_batch("b", "job", NOW)
    insert = (
        "INSERT INTO tasks (id, batch, item_key, name, args, codec, status, created_at, "
        "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )
    rows = [
        (f"b/{i}", "b", str(i), "job", "{}", "json", "completed", stamp, stamp)
        for i in range(finished)
    ]
    rows += [
        (f"b/p{i}", "b", f"p{i}", "job", "{}", "json", "pending", stamp, stamp)
        for i in range(pending)
    ]

    def write(tx: Tx) -> int:
        return tx.exec_many(insert, rows)

    store._atomically(write)
    store.enqueue([NewTask(f"c/p{i}", "other", "{}", "json", "c", f"p{i}") for i in range(2)], NOW)
    store.enqueue([NewTask(f"b/r{i}", "job", "{}", "json", "b", f"r{i}") for i in range(2)], NOW)
    for i, until in enumerate((NOW - timedelta(hours=1), LEASE_UNTIL)):
        claimed = store.claim_task(f"b/r{i}", 0, f"elsewhere/{i}/1/n", until, NOW)
        assert claimed is not None
    store._exec("ANALYZE tasks" if not isinstance(store, SQLiteStore) else "ANALYZE")


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SQLStore]:
    """A store of each backend holding 100,000 finished tasks, 100,000 pending ones
    enqueued after them, and a few more claimable ones; built once for the module
    (the tests only read, and roll back what they explain)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('plans') / 'history.db'}"
        dropped = None
    else:
        url, dropped = _module_database(request)
    opened = open_store(url)
    assert isinstance(opened, SQLStore)
    _fill(opened, FINISHED, pending=PENDING)
    yield opened
    opened.close()
    if dropped is not None:
        dropped()


def _module_database(request: pytest.FixtureRequest) -> tuple[str, Callable[[], None]]:
    """A migrated PostgreSQL database for this module, and how to drop it."""
    import psycopg

    template = request.getfixturevalue("pg_template")
    admin = postgres_admin_url()
    name = f"cairn_plans_{os.getpid()}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {template}")

    def drop() -> None:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    return with_database(admin, name), drop


# -- reading plans -----------------------------------------------------------------------
class _RolledBack(Exception):
    def __init__(self, plan: Any) -> None:
        super().__init__("rolled back")
        self.plan = plan


def _pg_plan(store: SQLStore, statement: str, params: list[Any]) -> dict[str, Any]:
    """The executed plan of ``statement`` (an UPDATE is rolled back after)."""

    def explain(tx: Tx) -> None:
        rows = tx.exec(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", params).rows
        raise _RolledBack(rows[0][0][0]["Plan"])

    with pytest.raises(_RolledBack) as explained:
        store._atomically(explain)
    plan: dict[str, Any] = explained.value.plan
    return plan


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _assert_pg_reads_few_rows(plan: dict[str, Any], what: str) -> list[str]:
    """No node reads the finished rows; returns the indexes the plan scans."""
    indexes = []
    for node in _nodes(plan):
        assert node["Node Type"] != "Seq Scan", (what, node)
        removed = node.get("Rows Removed by Filter", 0) + node.get(
            "Rows Removed by Index Recheck", 0
        )
        assert removed <= FEW, (what, node)
        assert node.get("Actual Rows", 0) <= FEW, (what, node)
        if "Index Name" in node:
            indexes.append(node["Index Name"])
    return indexes


def _sqlite_plan(store: SQLStore, statement: str, params: list[Any]) -> list[str]:
    return [str(row[3]) for row in store._exec(f"EXPLAIN QUERY PLAN {statement}", params).rows]


def _reads_history(step: str) -> bool:
    """A SQLite plan step that walks the table, or an index of every row, in order."""
    if not step.startswith("SCAN tasks"):
        return False
    return not any(f"INDEX {index}" in step for index in PARTIAL_INDEXES)


def _claims() -> list[tuple[str, str | None, tuple[str, ...] | None]]:
    """(label, batch, names) for the three ways a claim picks its candidates."""
    return [
        ("of a batch", "b", None),
        ("of task names", None, ("job", "x")),
        ("of any", None, None),
    ]


# -- the tests -----------------------------------------------------------------------------
def test_the_next_claim_reads_pending_rows_only(store: SQLStore) -> None:
    """Claiming the next task of one batch, of some task names (a worker), or of
    any, searches an index that holds only pending rows; on PostgreSQL no node
    of the executed plan reads more than a few rows."""
    for label, batch, names in _claims():
        statements = store.claim_statements(batch, names, "me", LEASE_UNTIL, NOW)
        pending, params, (probe, probe_params), _ = statements[0]
        if isinstance(store, SQLiteStore):
            # SQLite looks with a read first (no write lock for an idle poll).
            looked = _sqlite_plan(store, probe, probe_params)
            assert any("INDEX tasks_pending" in step for step in looked), (label, looked)
            plan = _sqlite_plan(store, pending, params)
            assert any(
                "USING INDEX tasks_pending" in step or "USING COVERING INDEX tasks_pending" in step
                for step in plan
            ), (label, plan)
            assert not any(_reads_history(step) for step in plan), (label, plan)
        else:
            indexes = _assert_pg_reads_few_rows(_pg_plan(store, pending, params), label)
            assert PENDING_INDEXES & set(indexes), (label, indexes)


def test_a_fair_claim_is_one_seek_of_the_fair_index(store: SQLStore) -> None:
    """A fair claim (a worker serving every batch, after batch ``b`` and at the
    round's start) finds the highest pending priority with one probe of
    tasks_pending and the next batch's task with one seek of tasks_pending_fair:
    no plan reads history, and with 100,000 pending tasks in ``b`` the claim
    after ``b`` does not walk them to reach batch ``c``."""
    for label, names in (("of task names", ("job", "other")), ("of any", None)):
        for after in ("b", ""):
            statements = store.claim_statements(
                None, names, "me", LEASE_UNTIL, NOW, after_batch=after
            )
            fair, params, (probe, probe_params), _ = statements[0]
            assert "batch > ?" in fair
            if isinstance(store, SQLiteStore):
                for plan in (
                    _sqlite_plan(store, probe, probe_params),
                    _sqlite_plan(store, fair, params),
                ):
                    assert any("INDEX tasks_pending_fair" in step for step in plan), (label, plan)
                    assert any("INDEX tasks_pending " in f"{step} " for step in plan), (label, plan)
                    assert not any(_reads_history(step) for step in plan), (label, plan)
            else:
                indexes = _assert_pg_reads_few_rows(_pg_plan(store, fair, params), label)
                assert {"tasks_pending_fair", "tasks_pending"} <= set(indexes), (label, indexes)
    claim = store.claim_statements(None, None, "me", LEASE_UNTIL, NOW, after_batch="b")[0]
    found = store._exec(*claim.probe).rows
    batch = store._exec("SELECT batch FROM tasks WHERE pos = ?", [found[0][0]]).rows
    assert batch == [("c",)]


def test_a_due_waiting_task_is_found_without_reading_history(store: SQLStore) -> None:
    """The second claim statement (a waiting task whose timeout has passed) reads
    the index of waiting rows only."""
    for label, batch, names in _claims():
        due, params, *_ = store.claim_statements(batch, names, "me", LEASE_UNTIL, NOW)[1]
        if isinstance(store, SQLiteStore):
            plan = _sqlite_plan(store, due, params)
            assert not any(_reads_history(step) for step in plan), (label, plan)
        else:
            _assert_pg_reads_few_rows(_pg_plan(store, due, params), label)


def test_the_orphan_queries_read_running_rows_only(store: SQLStore) -> None:
    """Finding orphans (expired leases, the owners of running tasks, one owner's
    tasks) reads the running rows only."""
    where, params = "batch = ?", ["b"]
    queries = [
        (
            "expired",
            sql.EXPIRED_RUNNING.format(filter=where),
            [store._ts(LAPSED_BEFORE), *params, 16],
        ),
        ("owners", sql.RUNNING_OWNERS.format(filter=where), params),
        ("owned", sql.OWNED_RUNNING.format(filter=where), ["elsewhere/0/1/n", *params, 16]),
    ]
    for label, statement, values in queries:
        if isinstance(store, SQLiteStore):
            plan = _sqlite_plan(store, statement, values)
            assert not any(_reads_history(step) for step in plan), (label, plan)
        else:
            _assert_pg_reads_few_rows(_pg_plan(store, statement, values), label)
    expired = store.expired_running("b", None, LAPSED_BEFORE, 16)
    assert [task.id for task in expired] == ["b/r0"]


def _vm_steps(store: SQLiteStore) -> int:
    """SQLite VM instructions run by one claim of the next pending task of ``b``."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    conn = store._conn()
    conn.set_progress_handler(count, 1)
    try:
        claimed = store.claim_next_pending("b", "me", LEASE_UNTIL, NOW)
    finally:
        conn.set_progress_handler(None, 1)
    assert claimed is not None
    return steps


def test_a_sqlite_claim_costs_the_same_with_100000_finished_tasks(tmp_path: Path) -> None:
    """The instructions SQLite runs for a claim are the same with 100,000 finished
    tasks as with none (within a few percent: the index b-tree is one level deeper)."""
    costs = []
    for finished in (0, FINISHED):
        opened = open_store(f"sqlite:///{tmp_path / f'{finished}.db'}")
        assert isinstance(opened, SQLiteStore)
        try:
            _fill(opened, finished)
            costs.append(_vm_steps(opened))
        finally:
            opened.close()
    empty, full = costs
    assert full <= empty * 1.1 + 20, costs
