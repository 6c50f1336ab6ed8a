"""Read-only SQL behind cairn's metrics, stall checks, reports and dashboard.

Functions take a ``SQLStore`` and use only its ``_exec`` and ``_ts`` primitives,
with portable SQL (SQLite and PostgreSQL 15 alike): ``?`` placeholders, no JSON
operators, no date arithmetic. Durations are computed by the caller from the
times returned (``sql.time_of`` reads either backend's form).

A ``Window`` selects tasks by when they were created: ``since <= created_at <
until``. Tasks cairn runs for itself (names starting ``cairn.``: stall alerts,
daily reports) are left out of every count.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cairn.store import sql
from cairn.store.records import TaskRecord
from cairn.store.sqlbase import SQLStore

# Names of the tasks cairn runs for itself (cairn.observe); never counted.
INTERNAL_PREFIX = "cairn."
_PUBLIC = f"substr(t.name, 1, {len(INTERNAL_PREFIX)}) <> '{INTERNAL_PREFIX}'"


@dataclass(frozen=True)
class Window:
    """Which tasks count: created in ``[since, until)``, of ``batch`` if given."""

    since: datetime | None = None
    until: datetime | None = None
    batch: str | None = None


def _where(store: SQLStore, window: Window) -> tuple[str, list[Any]]:
    """The WHERE clause (over tasks aliased ``t``) and its parameters."""
    clauses, params = [_PUBLIC], []
    if window.since is not None:
        clauses.append("t.created_at >= ?")
        params.append(store._ts(window.since))
    if window.until is not None:
        clauses.append("t.created_at < ?")
        params.append(store._ts(window.until))
    if window.batch is not None:
        clauses.append("t.batch = ?")
        params.append(window.batch)
    return " AND ".join(clauses), params


def _rows(store: SQLStore, statement: str, params: list[Any]) -> list[tuple[Any, ...]]:
    return store._exec(statement, params).rows


# -- tasks -------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskTotals:
    """Counts over the tasks of a window."""

    by_status: dict[str, int]
    interrupted: int
    interrupted_completed: int
    interruptions: int
    task_retries: int


def task_totals(store: SQLStore, window: Window) -> TaskTotals:
    where, params = _where(store, window)
    by_status = {
        str(status): int(n)
        for status, n in _rows(
            store, f"SELECT t.status, COUNT(*) FROM tasks t WHERE {where} GROUP BY t.status", params
        )
    }
    # A task attempt after the first is a retry of the whole task.
    row = _rows(
        store,
        "SELECT COALESCE(SUM(CASE WHEN t.interruptions > 0 THEN 1 ELSE 0 END), 0), "
        "COALESCE(SUM(CASE WHEN t.interruptions > 0 AND t.status = 'completed' "
        "THEN 1 ELSE 0 END), 0), COALESCE(SUM(t.interruptions), 0), "
        "COALESCE(SUM(CASE WHEN t.attempts > 1 THEN t.attempts - 1 ELSE 0 END), 0) "
        f"FROM tasks t WHERE {where}",
        params,
    )[0]
    return TaskTotals(by_status, int(row[0]), int(row[1]), int(row[2]), int(row[3]))


def failed_task_errors(store: SQLStore, window: Window) -> Iterator[str | None]:
    """The recorded error (JSON text) of every failed task in the window."""
    where, params = _where(store, window)
    statement = f"SELECT t.error FROM tasks t WHERE {where} AND t.status = 'failed'"
    for (error,) in _rows(store, statement, params):
        yield error


@dataclass(frozen=True)
class BatchSpan:
    """One batch's first start and last finish, and how many tasks are unfinished."""

    name: str
    tasks: int
    unfinished: int
    first_started_at: datetime | None
    last_finished_at: datetime | None


def batch_spans(store: SQLStore, window: Window) -> list[BatchSpan]:
    where, params = _where(store, window)
    statement = (
        "SELECT t.batch, COUNT(*), "
        "COALESCE(SUM(CASE WHEN t.status = 'pending' OR t.status = 'running' "
        "OR t.status = 'waiting' "
        "THEN 1 ELSE 0 END), 0), MIN(t.started_at), MAX(t.finished_at) "
        f"FROM tasks t WHERE {where} AND t.batch IS NOT NULL GROUP BY t.batch ORDER BY t.batch"
    )
    return [
        BatchSpan(r[0], int(r[1]), int(r[2]), sql.opt_time(r[3]), sql.opt_time(r[4]))
        for r in _rows(store, statement, params)
    ]


# -- steps -------------------------------------------------------------------------


@dataclass(frozen=True)
class StepTotals:
    """Counts over the step rows (kind 'step') of the window's tasks."""

    rows: int
    calls: int
    retries: int
    failed: int
    # Completed steps of interrupted tasks that took more than one call: see
    # docs/observability.md for why this is a suspicion, not a proof.
    suspect_reruns: int
    suspect_rerun_tasks: int


def step_totals(store: SQLStore, window: Window) -> StepTotals:
    where, params = _where(store, window)
    suspect = "s.status = 'completed' AND s.attempts > 1 AND t.interruptions > 0"
    row = _rows(
        store,
        "SELECT COUNT(*), COALESCE(SUM(s.attempts), 0), "
        "COALESCE(SUM(s.attempts - 1), 0), "
        "COALESCE(SUM(CASE WHEN s.status = 'failed' THEN 1 ELSE 0 END), 0), "
        f"COALESCE(SUM(CASE WHEN {suspect} THEN 1 ELSE 0 END), 0), "
        f"COUNT(DISTINCT CASE WHEN {suspect} THEN t.id END) "
        f"FROM steps s JOIN tasks t ON t.id = s.task_id WHERE {where} AND s.kind = 'step'",
        params,
    )[0]
    return StepTotals(*(int(v) for v in row))


def step_durations(store: SQLStore, window: Window) -> Iterator[tuple[str, datetime, datetime]]:
    """(name, started_at, finished_at) of every completed step in the window."""
    where, params = _where(store, window)
    statement = (
        "SELECT s.name, s.started_at, s.finished_at FROM steps s "
        f"JOIN tasks t ON t.id = s.task_id WHERE {where} "
        "AND s.kind = 'step' AND s.status = 'completed'"
    )
    for name, started, finished in _rows(store, statement, params):
        yield str(name), sql.time_of(started), sql.time_of(finished)


def step_errors(store: SQLStore, window: Window) -> Iterator[str | None]:
    """The last recorded error of every failed or retrying step row in the window."""
    where, params = _where(store, window)
    statement = (
        f"SELECT s.error FROM steps s JOIN tasks t ON t.id = s.task_id WHERE {where} "
        "AND (s.status = 'failed' OR s.status = 'retrying')"
    )
    for (error,) in _rows(store, statement, params):
        yield error


# -- operations --------------------------------------------------------------------


@dataclass(frozen=True)
class OpTotals:
    """Operation keys first claimed in the window, and their calls."""

    keys: int
    redundant_keys: int
    calls: int


def op_totals(store: SQLStore, window: Window) -> OpTotals:
    clauses, params = ["1 = 1"], []
    if window.since is not None:
        clauses.append("first_claimed_at >= ?")
        params.append(store._ts(window.since))
    if window.until is not None:
        clauses.append("first_claimed_at < ?")
        params.append(store._ts(window.until))
    if window.batch is not None:
        clauses.append("task_id IN (SELECT id FROM tasks WHERE batch = ?)")
        params.append(window.batch)
    row = _rows(
        store,
        "SELECT COUNT(*), COALESCE(SUM(CASE WHEN calls > 1 THEN 1 ELSE 0 END), 0), "
        f"COALESCE(SUM(calls), 0) FROM operations WHERE {' AND '.join(clauses)}",
        params,
    )[0]
    return OpTotals(int(row[0]), int(row[1]), int(row[2]))


# -- running tasks and their last checkpoint -----------------------------------------


@dataclass(frozen=True)
class RunningTask:
    """A running task and the last moment it showed progress."""

    task_id: str
    batch: str | None
    name: str
    owner: str | None
    checkpoint: datetime


# The last checkpoint is the latest of: a step finishing, the task being
# claimed (start or take-over; updated_at moves then), a task attempt starting.
# One probe of the steps primary key per running task.
_RUNNING = (
    "SELECT t.id, t.batch, t.name, t.owner, t.started_at, t.updated_at, "
    "(SELECT MAX(s.finished_at) FROM steps s WHERE s.task_id = t.id) "
    f"FROM tasks t WHERE t.status = 'running' AND {_PUBLIC} ORDER BY t.pos"
)


def running_tasks(store: SQLStore) -> list[RunningTask]:
    found = []
    for tid, batch, name, owner, started, updated, last_step in _rows(store, _RUNNING, []):
        moments = [sql.time_of(updated)]
        moments += [sql.time_of(m) for m in (started, last_step) if m is not None]
        found.append(RunningTask(tid, batch, name, owner, max(moments)))
    return found


def open_alerts(store: SQLStore, alert_task: str, raised: str, cleared: str) -> list[str]:
    """Ids (without the ``raised`` prefix) of alert tasks that completed and have
    no ``cleared`` twin yet: stalls alerted and not yet recovered."""
    statement = (
        "SELECT substr(t.id, ?) FROM tasks t WHERE t.name = ? AND t.status = 'completed' "
        "AND substr(t.id, 1, ?) = ? AND NOT EXISTS (SELECT 1 FROM tasks r "
        "WHERE r.id = CAST(? AS TEXT) || substr(t.id, ?)) ORDER BY t.pos"
    )
    size = len(raised)
    params = [size + 1, alert_task, size, raised, cleared, size + 1]
    return [str(r[0]) for r in _rows(store, statement, params)]


# -- pages for the dashboard ---------------------------------------------------------


def task_page(
    store: SQLStore, *, status: str | None, batch: str | None, before: int | None, size: int
) -> list[tuple[int, TaskRecord]]:
    """Up to ``size`` tasks, newest first, with positions below ``before``.

    Keyset paging over ``pos``: the (batch, status, pos) and (status) indexes
    keep a page fast however many tasks the store holds."""
    clauses: list[str] = ["1 = 1"]
    params: list[Any] = []
    if status is not None:
        clauses.append("status = ?")
        params.append(status)
    if batch is not None:
        clauses.append("batch = ?")
        params.append(batch)
    if before is not None:
        clauses.append("pos < ?")
        params.append(before)
    statement = (
        f"SELECT pos, {sql.TASK_COLUMNS} FROM tasks WHERE {' AND '.join(clauses)} "
        "ORDER BY pos DESC LIMIT ?"
    )
    rows = _rows(store, statement, [*params, size])
    return [(int(r[0]), sql.task_record(r[1:])) for r in rows]
