"""The SQL of reruns from a step, their lineage, a cancel that reaches a task's
children, and the audit trail (``cairn.store.sqlruns`` runs it). Portable SQL,
``?`` placeholders, as in ``cairn.store.sql``; never on the hot path.
"""

from __future__ import annotations

from cairn.store import tables
from cairn.store.sql import TAKE_KEY, TASK_COLUMNS

TASK_RUN_COLUMNS = tables.TASK_RUNS.listed()
AUDIT_COLUMNS = tables.AUDIT.listed()
_FINISHED = "(status = 'completed' OR status = 'failed' OR status = 'cancelled')"
_UNFINISHED = "(status = 'pending' OR status = 'running' OR status = 'waiting')"

# -- a rerun from a step -------------------------------------------------------------
# The run a rerun supersedes, as the task row holds it; {lock} is FOR UPDATE where
# the backend has row locks (SQLite's BEGIN IMMEDIATE already serialises writers).
FORK_READ = (
    "SELECT run, status, result, error, attempts, started_at, finished_at FROM tasks "
    "WHERE id = ?{lock}"
)
# The next run: pending again with a fresh retry budget and no outcome, its first
# start to come (so its version and time limit are the new run's), and the fence
# moved, so nothing of the old run can write any more. Only a finished task of
# the run the caller looked at: a rerun that raced another changes nothing.
FORK_TASK = (
    "UPDATE tasks SET status = 'pending', run = run + 1, fence = fence + 1, "
    "retry_base = attempts, result = NULL, error = NULL, started_at = NULL, "
    "finished_at = NULL, owner = NULL, lease_expires_at = NULL, wake_at = NULL, "
    f"{TAKE_KEY}, updated_at = ? WHERE id = ? AND run = ? AND {_FINISHED}"
)
INSERT_TASK_RUN = f"INSERT INTO task_runs ({TASK_RUN_COLUMNS}) VALUES ({', '.join('?' * 11)})"
INSERT_SUPERSEDED = (
    "INSERT INTO superseded_entries (task_id, run, seq, kind, name, entry) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)
# The entries from the fork point on leave the task's history (they are kept as
# superseded entries, written just before in the same transaction).
DROP_ENTRIES = "DELETE FROM steps WHERE task_id = ? AND seq >= ?"
# This very fork (the superseded run's row at its stamp), found by a fork run
# again after its answer was lost (SQLCore._atomically_once).
OWN_FORK = "SELECT 1 FROM task_runs WHERE task_id = ? AND run = ? AND forked_at = ?"

# -- lineage ---------------------------------------------------------------------
TASK_RUNS = f"SELECT {TASK_RUN_COLUMNS} FROM task_runs WHERE task_id = ? ORDER BY run"
SUPERSEDED = (
    "SELECT run, entry FROM superseded_entries WHERE task_id = ? AND run >= ? ORDER BY run, seq"
)
# The tasks of a batch (or of every batch) whose current run came from a rerun.
FORKED_TASKS = f"SELECT {TASK_COLUMNS} FROM tasks WHERE run > 1 AND {{filter}} ORDER BY pos"

# -- a cancel that reaches the task's children ---------------------------------------
# The fence moves, so a running owner's next write fails and it stops (as CANCEL).
_CANCEL_SET = (
    "status = 'cancelled', fence = fence + 1, owner = NULL, lease_expires_at = NULL, "
    "finished_at = ?, updated_at = ?"
)
CANCEL_ROOT = f"UPDATE tasks SET {_CANCEL_SET} WHERE id = ? AND {_UNFINISHED}"
# One generation: the children of the tasks {ids} (in any status: a finished
# child may still have children running), and those of them cancelled now.
CHILDREN_OF = "SELECT id FROM tasks WHERE parent_id IN ({ids}) ORDER BY pos"
CANCEL_CHILDREN = (
    f"UPDATE tasks SET {_CANCEL_SET} WHERE parent_id IN ({{ids}}) AND {_UNFINISHED} "
    "RETURNING id, pos"
)
# This very cascade (the task cancelled at its stamp), found by a cascade run
# again after its answer was lost.
OWN_CANCEL = "SELECT 1 FROM tasks WHERE id = ? AND status = 'cancelled' AND updated_at = ?"
# Its children cancelled at that stamp, for the answer of such a try.
CANCELLED_WITH = (
    "SELECT id, pos FROM tasks WHERE parent_id IN ({ids}) AND status = 'cancelled' "
    "AND updated_at = ?"
)

# -- the audit trail ---------------------------------------------------------------
BEGIN_AUDIT = (
    "INSERT INTO audit (at, actor, action, target, detail) VALUES (?, ?, ?, ?, ?) RETURNING id"
)
# This very entry, found by an insert run again after its answer was lost.
OWN_AUDIT = (
    "SELECT id FROM audit WHERE at = ? AND actor = ? AND action = ? AND target = ? "
    "ORDER BY id DESC LIMIT 1"
)
END_AUDIT = "UPDATE audit SET count = ?, outcome = ? WHERE id = ?"
AUDIT_PAGE = f"SELECT {AUDIT_COLUMNS} FROM audit WHERE id < ? ORDER BY id DESC LIMIT ?"
