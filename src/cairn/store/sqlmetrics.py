"""The read-only SQL behind cairn's metrics, stall checks and reports
(``cairn.store.sqladmin`` runs it).

Portable SQL (SQLite and PostgreSQL 15 alike): ``?`` placeholders, no JSON
operators, no date arithmetic. Durations are computed by the caller from the
times returned (``sql.time_of`` reads either backend's form).

A ``Window`` selects tasks by when they were created: ``since <= created_at <
until``. Tasks cairn runs for itself (names starting ``cairn.``: stall alerts,
daily reports) are left out of every count. ``{where}`` in a statement is the
window's clause over tasks aliased ``t`` (``window_filter``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from cairn.store.reports import Window

# Names of the tasks cairn runs for itself (cairn.observe); never counted.
INTERNAL_PREFIX = "cairn."
_PUBLIC = f"substr(t.name, 1, {len(INTERNAL_PREFIX)}) <> '{INTERNAL_PREFIX}'"
# Operations of cairn's own tasks (an alert's webhook retried) are not counted
# either: they would show as redundant execution of the user's work.
_PUBLIC_OPS = f"task_id NOT IN (SELECT t.id FROM tasks t WHERE NOT ({_PUBLIC}))"


def window_filter(window: Window, ts: Callable[[datetime], Any]) -> tuple[str, list[Any]]:
    """The WHERE clause (over tasks aliased ``t``) and its parameters; ``ts``
    turns a time into the backend's parameter."""
    clauses, params = [_PUBLIC], []
    if window.since is not None:
        clauses.append("t.created_at >= ?")
        params.append(ts(window.since))
    if window.until is not None:
        clauses.append("t.created_at < ?")
        params.append(ts(window.until))
    if window.batch is not None:
        clauses.append("t.batch = ?")
        params.append(window.batch)
    return " AND ".join(clauses), params


# -- tasks -------------------------------------------------------------------------
TASKS_BY_STATUS = "SELECT t.status, COUNT(*) FROM tasks t WHERE {where} GROUP BY t.status"
# A task attempt after the first is a retry of the whole task.
TASK_TOTALS = (
    "SELECT COALESCE(SUM(CASE WHEN t.interruptions > 0 THEN 1 ELSE 0 END), 0), "
    "COALESCE(SUM(CASE WHEN t.interruptions > 0 AND t.status = 'completed' "
    "THEN 1 ELSE 0 END), 0), COALESCE(SUM(t.interruptions), 0), "
    "COALESCE(SUM(CASE WHEN t.attempts > 1 THEN t.attempts - 1 ELSE 0 END), 0) "
    "FROM tasks t WHERE {where}"
)
# Both of the above and the batch spans in one scan, for the exporter: a row per
# (batch, status) with its counts, the first start and the last finish.
TASK_SUMMARY = (
    "SELECT t.batch, t.status, COUNT(*), "
    "COALESCE(SUM(CASE WHEN t.interruptions > 0 THEN 1 ELSE 0 END), 0), "
    "COALESCE(SUM(t.interruptions), 0), "
    "COALESCE(SUM(CASE WHEN t.attempts > 1 THEN t.attempts - 1 ELSE 0 END), 0), "
    "MIN(t.started_at), MAX(t.finished_at) FROM tasks t WHERE {where} GROUP BY t.batch, t.status"
)
FAILED_TASK_ERRORS = "SELECT t.error FROM tasks t WHERE {where} AND t.status = 'failed'"
BATCH_SPANS = (
    "SELECT t.batch, COUNT(*), "
    "COALESCE(SUM(CASE WHEN t.status = 'pending' OR t.status = 'running' "
    "OR t.status = 'waiting' "
    "THEN 1 ELSE 0 END), 0), MIN(t.started_at), MAX(t.finished_at) "
    "FROM tasks t WHERE {where} AND t.batch IS NOT NULL GROUP BY t.batch ORDER BY t.batch"
)

# -- steps -------------------------------------------------------------------------
_SUSPECT = "s.status = 'completed' AND s.attempts > 1 AND t.interruptions > 0"
STEP_TOTALS = (
    "SELECT COUNT(*), COALESCE(SUM(s.attempts), 0), "
    "COALESCE(SUM(s.attempts - 1), 0), "
    "COALESCE(SUM(CASE WHEN s.status = 'failed' THEN 1 ELSE 0 END), 0), "
    f"COALESCE(SUM(CASE WHEN {_SUSPECT} THEN 1 ELSE 0 END), 0), "
    f"COUNT(DISTINCT CASE WHEN {_SUSPECT} THEN t.id END) "
    "FROM steps s JOIN tasks t ON t.id = s.task_id WHERE {where} AND s.kind = 'step'"
)
STEP_DURATIONS = (
    "SELECT s.name, s.started_at, s.finished_at FROM steps s "
    "JOIN tasks t ON t.id = s.task_id WHERE {where} "
    "AND s.kind = 'step' AND s.status = 'completed'"
)
# Completed steps and model calls, for the exporter's histograms: it reads only
# the rows finished since its last scrape (the caller appends that clause).
FINISHED_STEPS = (
    "SELECT s.task_id, s.seq, s.kind, s.name, s.attempts, s.started_at, s.finished_at "
    "FROM steps s JOIN tasks t ON t.id = s.task_id WHERE {where} "
    "AND (s.kind = 'step' OR s.kind = 'llm') AND s.status = 'completed'"
)
# The suspect re-runs alone, reached through the interrupted tasks.
SUSPECT_RERUNS = (
    "SELECT COUNT(*), COUNT(DISTINCT t.id) FROM tasks t JOIN steps s ON s.task_id = t.id "
    "WHERE {where} AND t.interruptions > 0 AND s.kind = 'step' AND s.status = 'completed' "
    "AND s.attempts > 1"
)
STEP_ERRORS = (
    "SELECT s.error FROM steps s JOIN tasks t ON t.id = s.task_id WHERE {where} "
    "AND (s.status = 'failed' OR s.status = 'retrying')"
)


# -- operations --------------------------------------------------------------------
def op_filter(window: Window, ts: Callable[[datetime], Any]) -> tuple[str, list[Any]]:
    """The WHERE clause over operations first claimed in the window (of its
    batch's tasks, if it names one), and its parameters."""
    clauses, params = [_PUBLIC_OPS], []
    if window.since is not None:
        clauses.append("first_claimed_at >= ?")
        params.append(ts(window.since))
    if window.until is not None:
        clauses.append("first_claimed_at < ?")
        params.append(ts(window.until))
    if window.batch is not None:
        clauses.append("task_id IN (SELECT id FROM tasks WHERE batch = ?)")
        params.append(window.batch)
    return " AND ".join(clauses), params


OP_TOTALS = (
    "SELECT COUNT(*), COALESCE(SUM(CASE WHEN calls > 1 THEN 1 ELSE 0 END), 0), "
    "COALESCE(SUM(calls), 0) FROM operations WHERE {where}"
)

# -- running tasks and their last checkpoint -----------------------------------------
# The last checkpoint is the latest of: a step finishing, the task being
# claimed (start or take-over; updated_at moves then), a task attempt starting.
# Two probes of the steps primary key per running task.
# The step in flight a running task's heartbeat noted, unless an entry was
# completed at its position, or one recorded after it, since (that step ended;
# the next one is noted at the next beat).
IN_FLIGHT_COLUMNS = (
    "t.step_now_seq, t.step_now, t.step_now_at, "
    "NOT EXISTS (SELECT 1 FROM steps f WHERE f.task_id = t.id AND (f.seq > t.step_now_seq "
    "OR (f.seq = t.step_now_seq AND f.status = 'completed')))"
)
RUNNING = (
    "SELECT t.id, t.batch, t.name, t.owner, t.started_at, t.updated_at, "
    "(SELECT MAX(s.finished_at) FROM steps s WHERE s.task_id = t.id), "
    "(SELECT s.name FROM steps s WHERE s.task_id = t.id ORDER BY s.seq DESC LIMIT 1), "
    f"{IN_FLIGHT_COLUMNS}, t.item_key, t.args, t.codec "
    f"FROM tasks t WHERE t.status = 'running' AND {_PUBLIC} ORDER BY t.pos"
)
# cairn's own tasks' failures are not the user's (an alert whose webhook is down).
FAILED_SINCE = (
    "SELECT {columns} FROM tasks t WHERE t.status = 'failed' AND t.finished_at >= ? "
    f"AND {_PUBLIC} ORDER BY t.finished_at, t.pos LIMIT ?"
)
# The steps in flight of some running tasks ({ids}: their placeholders).
IN_FLIGHT = (
    f"SELECT t.id, {IN_FLIGHT_COLUMNS} FROM tasks t "
    "WHERE t.id IN ({ids}) AND t.status = 'running' AND t.step_now_seq IS NOT NULL"
)
# Alert tasks that completed with no cleared twin yet. Parameters: the prefix's
# length + 1, the alert task's name, the prefix's length, the raised prefix,
# the cleared prefix, the prefix's length + 1.
OPEN_ALERTS = (
    "SELECT substr(t.id, ?) FROM tasks t WHERE t.name = ? AND t.status = 'completed' "
    "AND substr(t.id, 1, ?) = ? AND NOT EXISTS (SELECT 1 FROM tasks r "
    "WHERE r.id = CAST(? AS TEXT) || substr(t.id, ?)) ORDER BY t.pos"
)

# The metrics page's hourly counts (schema 9; cairn.admin.charts): the hours
# summed, and the finishes of a span of time (through tasks_by_finish), cairn's
# own tasks left out.
METRIC_HOURS_SINCE = (
    "SELECT hour, finished, failed, cost FROM metric_hours WHERE hour >= ? ORDER BY hour"
)
# The model calls and compactions finished in a span of time, through
# calls_by_finish (its predicate repeated, so the planner takes it).
CALLS_FINISHED_BETWEEN = (
    "SELECT s.finished_at, t.id, t.batch, t.codec, s.seq, s.kind, s.name, s.output "
    "FROM steps s JOIN tasks t ON t.id = s.task_id "
    "WHERE (s.kind = 'llm' OR s.kind = 'conv') AND s.finished_at >= ? AND s.finished_at < ? "
    f"AND s.status = 'completed' AND {_PUBLIC}"
)
FINISHES_BETWEEN = (
    "SELECT t.finished_at, t.status FROM tasks t WHERE t.finished_at >= ? "
    f"AND t.finished_at < ? AND {_PUBLIC}"
)
SAVE_METRIC_HOUR = (
    "INSERT INTO metric_hours (hour, finished, failed, cost) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (hour) DO UPDATE SET finished = excluded.finished, failed = excluded.failed, "
    "cost = excluded.cost"
)
