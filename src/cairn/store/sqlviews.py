"""The SQL of the admin side's listings, views and operator actions: what
``cairn tasks``, ``batches``, ``ops``, ``cancel``, ``retry`` and the dashboard
ask of a store (``cairn.store.sqladmin`` runs it). Portable SQL, ``?``
placeholders, as in ``cairn.store.sql``, whose column lists it shares.
"""

from __future__ import annotations

import json
from typing import Any

from cairn.store.reports import TaskQuery
from cairn.store.sql import OP_COLUMNS, SCHEDULE_COLUMNS, TAKE_KEY, TASK_COLUMNS
from cairn.store.sqlmetrics import INTERNAL_PREFIX

PAGE = 500

# -- tasks and batches ------------------------------------------------------------
# Workers whose row was written since ? (schema 3), for `cairn versions`.
WORKERS_SEEN = "SELECT owner, versions FROM workers WHERE seen_at >= ? ORDER BY owner"
RUNNING_ALL = f"SELECT {TASK_COLUMNS} FROM tasks WHERE status = 'running' ORDER BY pos"
RUNNING_OF_BATCH = (
    f"SELECT {TASK_COLUMNS} FROM tasks WHERE batch = ? AND status = 'running' ORDER BY pos"
)
BATCH_SUMMARIES = (
    "SELECT b.name, b.task_name, b.created_at, t.status, COUNT(t.id), "
    "MIN(t.started_at), MAX(t.finished_at) FROM batches b "
    "LEFT JOIN tasks t ON t.batch = b.name{where} "
    "GROUP BY b.name, b.task_name, b.created_at, t.status ORDER BY b.created_at, b.name"
)
# The fence moves too, so a running owner's next write fails and it stops.
CANCEL = (
    "UPDATE tasks SET status = 'cancelled', fence = fence + 1, owner = NULL, "
    "lease_expires_at = NULL, finished_at = ?, updated_at = ? "
    "WHERE id = ? AND (status = 'pending' OR status = 'running' OR status = 'waiting')"
)
# A task's priority, changed while it has not run yet (pending) or waits (a
# signal, a timeout): what the next claim reads. A running or finished task
# keeps its own; it is not claimed again before it ends.
SET_PRIORITY = (
    "UPDATE tasks SET priority = ?, updated_at = ? "
    "WHERE id = ? AND (status = 'pending' OR status = 'waiting')"
)
SET_BATCH_PRIORITY = (
    "UPDATE tasks SET priority = ?, updated_at = ? "
    "WHERE batch = ? AND (status = 'pending' OR status = 'waiting')"
)
RETRY = (
    "UPDATE tasks SET status = 'pending', retry_base = attempts, result = NULL, "
    f"finished_at = NULL, updated_at = ?, {TAKE_KEY} "
    "WHERE id = ? AND (status = 'failed' OR status = 'cancelled')"
)
# The same for every task of a batch in one status, in one statement: a batch of
# 100,000 tasks is cancelled at once, not task by task while its workers go on.
CANCEL_BATCH = (
    "UPDATE tasks SET status = 'cancelled', fence = fence + 1, owner = NULL, "
    "lease_expires_at = NULL, finished_at = ?, updated_at = ? "
    "WHERE batch = ? AND status = ? "
    "AND (status = 'pending' OR status = 'running' OR status = 'waiting') RETURNING id, pos"
)
RETRY_BATCH = (
    "UPDATE tasks SET status = 'pending', retry_base = attempts, result = NULL, "
    f"finished_at = NULL, updated_at = ?, {TAKE_KEY} "
    "WHERE batch = ? AND status = ? AND (status = 'failed' OR status = 'cancelled') "
    "RETURNING id, pos"
)
# What each change leaves, found by the change run again after its answer was
# lost (SQLCore._write_once): the task (or the batch's tasks) in the new status
# at the change's very stamp. A batch's change is made one status at a time at
# one stamp, so its look finds the tasks an earlier status's change moved too
# (the caller counts each task once).
CANCELLED_AT = "SELECT 1 FROM tasks WHERE id = ? AND status = 'cancelled' AND updated_at = ?"
RETRIED_AT = (
    "SELECT 1 FROM tasks WHERE id = ? AND status = 'pending' AND finished_at IS NULL "
    "AND updated_at = ?"
)
BATCH_CANCELLED_AT = (
    "SELECT id, pos FROM tasks WHERE batch = ? AND status = 'cancelled' AND updated_at = ?"
)
BATCH_RETRIED_AT = (
    "SELECT id, pos FROM tasks WHERE batch = ? AND status = 'pending' AND finished_at IS NULL "
    "AND updated_at = ?"
)
# -- listings with filters, keyset pages both ways and totals --------------------------
# Newest first is descending pos. A page older than a cursor reads pos below it
# descending; a page newer reads pos above it ascending (the caller turns it
# round), so either way the primary key (or a filter's index ending in pos)
# gives the rows in order and the statement stops after one page.
FIND_TASKS = f"SELECT pos, {TASK_COLUMNS} FROM tasks WHERE {{where}} ORDER BY pos {{order}} LIMIT ?"
COUNT_TASKS = "SELECT COUNT(*) FROM tasks WHERE {where}"
# The same, counting no further than a limit (a search's total: "more than N").
COUNT_TASKS_UP_TO = "SELECT COUNT(*) FROM (SELECT 1 FROM tasks WHERE {where} LIMIT ?) AS found"
CHILD_IDS = "SELECT id FROM tasks WHERE parent_id = ? ORDER BY pos"
# LIKE with this escape character, so a search for 50% or snake_case means itself.
_ESCAPE = "\\"


def like_pattern(text: str) -> str:
    """``%text%`` for LIKE, with LIKE's own wildcards in ``text`` escaped."""
    escaped = text.replace(_ESCAPE, _ESCAPE * 2).replace("%", _ESCAPE + "%")
    return "%" + escaped.replace("_", _ESCAPE + "_") + "%"


def task_query_filter(query: TaskQuery, ts: Any, like: str = "LIKE") -> tuple[list[str], list[Any]]:
    """The clauses and parameters that pick the tasks of ``query`` (``ts``
    turns a time into the backend's parameter; ``like``, the backend's LIKE
    that ignores letter case: a search compares no LOWER() of every row)."""
    where: list[str] = []
    params: list[Any] = []
    for column in ("status", "batch", "name"):
        value = getattr(query, column)
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if query.since is not None:
        where.append("created_at >= ?")
        params.append(ts(query.since))
    if query.until is not None:
        where.append("created_at < ?")
        params.append(ts(query.until))
    if query.search:
        # Any part of the id, the task's name or its error text, any case;
        # LIKE's own wildcards in the search mean themselves (like_pattern).
        match = f"{like} ? ESCAPE '{_ESCAPE}'"
        where.append(f"(id {match} OR name {match} OR error {match})")
        params += [like_pattern(query.search)] * 3
    if query.error_type == UNKNOWN_ERROR:
        where.append("error IS NULL")
    elif query.error_type is not None:
        # The recorded error is JSON starting with its type (engine.errortext).
        start = error_type_start(query.error_type)
        where.append("substr(error, 1, ?) = ?")
        params += [len(start), start]
    if not query.include_internal:
        where.append(f"substr(name, 1, {len(INTERNAL_PREFIX)}) <> '{INTERNAL_PREFIX}'")
    return where, params


# The failure group of tasks with no recorded error (cairn.admin.batches).
UNKNOWN_ERROR = "unknown"
# The failed tasks of a filter ({where}) by the start of their recorded error up
# to the end of its type (``{"type": "builtins.ValueError"``; {find}: the
# backend's instr), most first: a GROUP BY in the store, not a read of every
# failed task's error.
ERROR_GROUPS = (
    "SELECT substr(error, 1, {find}(error, '\", ')) AS head, COUNT(*) FROM tasks "
    "WHERE {where} AND status = 'failed' GROUP BY head ORDER BY COUNT(*) DESC, head LIMIT ?"
)


def error_type_of_head(head: str | None) -> str:
    """The error type an ``ERROR_GROUPS`` head names (``{"type": "X"``), or
    ``UNKNOWN_ERROR`` (no error recorded, or not cairn's JSON)."""
    if head is None:
        return UNKNOWN_ERROR
    try:
        value = json.loads(head + "}")
    except ValueError:
        return UNKNOWN_ERROR
    kind = value.get("type") if isinstance(value, dict) else None
    return kind if isinstance(kind, str) and kind else UNKNOWN_ERROR


# The name of the last failed entry of each of some tasks ({ids}).
FAILED_STEPS = (
    "SELECT task_id, name FROM steps WHERE task_id IN ({ids}) AND status = 'failed' "
    "ORDER BY task_id, seq"
)


def error_type_start(error_type: str) -> str:
    """How a recorded error of ``error_type`` starts, as
    ``cairn.engine.errortext.describe_error`` writes it (``json.dumps`` of a
    dict whose first key is the type)."""
    return json.dumps({"type": error_type}, ensure_ascii=False)[:-1] + ","


def find_tasks(clauses: list[str], *, newer: bool) -> str:
    """A page of ``FIND_TASKS`` over ``clauses``: ascending if ``newer``."""
    where = " AND ".join(clauses) or "1 = 1"
    return FIND_TASKS.format(where=where, order="ASC" if newer else "DESC")


# Batches, newest first by (created_at, name); cursors are that pair.
BATCH_NAMES_PAGE = (
    "SELECT name, created_at FROM batches WHERE {where} ORDER BY created_at {order}, name {order} "
    "LIMIT ?"
)
COUNT_BATCHES = "SELECT COUNT(*) FROM batches WHERE {where}"
BATCH_BEFORE = "(created_at < ? OR (created_at = ? AND name < ?))"
BATCH_AFTER = "(created_at > ? OR (created_at = ? AND name > ?))"


def batch_search(search: str | None) -> tuple[list[str], list[Any]]:
    """The clause that picks batches whose name holds ``search`` (any case)."""
    if not search:
        return [], []
    return [f"LOWER(name) LIKE LOWER(?) ESCAPE '{_ESCAPE}'"], [like_pattern(search)]


# -- operations -------------------------------------------------------------------
RESOLVE_OP = (
    "UPDATE operations SET status = ?, result = ?, checksum = ?, permanent = ?, completed_at = ?, "
    "updated_at = ?, error = COALESCE(?, error) "
    "WHERE scope = ? AND key = ? AND status != 'completed'"
)
# This very resolution (the key in its new status at its stamp), found by a
# resolve run again after its answer was lost.
RESOLVED_AT = (
    "SELECT 1 FROM operations WHERE scope = ? AND key = ? AND status = ? AND updated_at = ?"
)
OP_CALL_COUNTS = (
    "SELECT COALESCE(SUM(CASE WHEN calls > 1 THEN 1 ELSE 0 END), 0), COUNT(*) FROM operations"
)
# An operator who settles a key as failed says so in the audit, instead of
# keeping the error that left it in doubt.
RESOLVED_AS_FAILED = '{"type": "resolved", "message": "settled as failed by an operator"}'
OP_ORDER = "first_claimed_at, scope, key"
# After the last row of a page, in OP_ORDER.
OP_AFTER = "(first_claimed_at, scope, key) > (?, ?, ?)"


def operation_filter(
    prefix: str | None, since: Any, task_id: str | None, statuses: tuple[str, ...] | None
) -> tuple[list[str], list[Any]]:
    """The clauses and parameters that pick the operations of a listing
    (``since``: a time as the backend's parameter)."""
    where: list[str] = []
    params: list[Any] = []
    if prefix:
        # substr, not LIKE: keys may hold % or _.
        where.append("substr(key, 1, ?) = ?")
        params += [len(prefix), prefix]
    if since is not None:
        where.append("first_claimed_at >= ?")
        params.append(since)
    if task_id is not None:
        where.append("task_id = ?")
        params.append(task_id)
    if statuses:
        where.append("(" + " OR ".join("status = ?" for _ in statuses) + ")")
        params += list(statuses)
    return where, params


def operation_page(clauses: list[str]) -> str:
    """One page of the operations the ``clauses`` pick, in ``OP_ORDER``."""
    statement = f"SELECT {OP_COLUMNS} FROM operations"
    if clauses:
        statement += " WHERE " + " AND ".join(clauses)
    return statement + f" ORDER BY {OP_ORDER} LIMIT ?"


# -- conversations and recorded calls ---------------------------------------------
CONVERSATION_SUMMARIES = (
    "SELECT c.name, COUNT(*), "
    "COALESCE(SUM(CASE WHEN m.kind = 'summary' THEN 1 ELSE 0 END), 0), MAX(m.idx) + 1, "
    "COALESCE(SUM(CASE WHEN m.kind = 'message' THEN m.tokens ELSE 0 END), 0) "
    "FROM conversations c JOIN messages m ON m.conv_id = c.conv_id "
    "WHERE c.task_id = ? GROUP BY c.conv_id, c.name ORDER BY c.name"
)
# {filter} is one of: every task, one batch, one task.
RECORDED_CALLS = (
    "SELECT t.id, t.batch, t.codec, s.seq, s.kind, s.name, s.output "
    "FROM tasks t JOIN steps s ON s.task_id = t.id "
    "WHERE {filter} AND (s.kind = 'llm' OR s.kind = 'conv') AND s.status = 'completed' "
    "ORDER BY t.pos, s.seq"
)


def calls_filter(batch: str | None, task_id: str | None) -> tuple[str, tuple[str, ...]]:
    """The ``{filter}`` of ``RECORDED_CALLS`` and its parameters."""
    if task_id is not None:
        return "t.id = ?", (task_id,)
    if batch is not None:
        return "t.batch = ?", (batch,)
    return "1 = 1", ()


# -- schedules --------------------------------------------------------------------
LIST_SCHEDULES = f"SELECT {SCHEDULE_COLUMNS} FROM schedules ORDER BY name"
