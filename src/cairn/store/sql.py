"""The SQL every SQL store shares, and the conversion of its rows to records.

Statements use ``?`` placeholders; a backend that wants another style rewrites
them once (PostgreSQL uses ``%s``). Times go in through the backend's ``ts``
hook (ISO text for SQLite, datetimes for PostgreSQL's timestamptz) and come
back through ``time_of``, which accepts either. The column lists and the row
converters come from the table descriptions (``cairn.store.tables``).
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from cairn.clock import from_iso
from cairn.errors import RecordCorrupt
from cairn.store import tables
from cairn.store.records import (
    MessageRecord,
    OperationRecord,
    ScheduleRecord,
    StepRecord,
    TaskRecord,
)
from cairn.store.tables import Column, Kind, Table

R = TypeVar("R")

# Each table's columns, in the order records hold them (cairn.store.tables).
TASK_COLUMNS = tables.TASKS.listed()
STEP_COLUMNS = tables.STEPS.listed()
OP_COLUMNS = tables.OPERATIONS.listed()

# -- tasks and batches -----------------------------------------------------------
INSERT_BATCH = (
    "INSERT INTO batches (name, task_name, created_at) VALUES (?, ?, ?) "
    "ON CONFLICT (name) DO NOTHING"
)
INSERT_TASK = (
    "INSERT INTO tasks (id, batch, item_key, name, args, codec, status, created_at, "
    "updated_at, parent_id, version, priority) "
    "VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?) "
    "ON CONFLICT (id) DO NOTHING"
)
# A spawned child (ctx.spawn), made only while its parent runs under the fence
# the spawn saw ({lock}: FOR SHARE where the backend has row locks, so a cancel
# that moves the parent's fence meanwhile waits for this insert, then sees the
# child; or this insert waits for the cancel, then finds the fence moved).
INSERT_CHILD = (
    "INSERT INTO tasks (id, batch, item_key, name, args, codec, status, created_at, "
    "updated_at, parent_id, version, priority) "
    "SELECT ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, ? "
    "WHERE EXISTS (SELECT 1 FROM tasks WHERE id = ? AND fence = ? AND status = 'running'{lock}) "
    "ON CONFLICT (id) DO NOTHING"
)
# This very child (made at its stamp), found by an insert run again after its
# answer was lost.
OWN_CHILD = "SELECT 1 FROM tasks WHERE id = ? AND created_at = ?"
# How many of the tasks {ids} an enqueue made at its very stamp: what an
# enqueue run again after its answer was lost finds it made (its count of new
# tasks would otherwise be 0).
ENQUEUED_AT = "SELECT COUNT(*) FROM tasks WHERE created_at = ? AND id IN ({ids})"


def candidates(
    batch: str | None, names: Sequence[str] | None, versions: Sequence[str] | None = None
) -> tuple[str, list[Any]]:
    """The ``{filter}`` of a claim or an orphan query and its parameters: one
    batch, or any batch of some task names, or every task; with ``versions``,
    only tasks enqueued under one of them (or under none, before versions)."""
    if batch is not None:
        where, params = "batch = ?", [batch]
    elif names:
        where, params = "(" + " OR ".join("name = ?" for _ in names) + ")", list(names)
    else:
        where, params = "1 = 1", []
    if versions is None:
        return where, params
    versions = list(versions)
    ors = "".join(" OR version = ?" for _ in versions)
    return f"{where} AND (version IS NULL{ors})", [*params, *versions]


# Taking over a task that was still running counts as an interruption. The
# first claim records the claimer's app version (the last ?; NULL keeps the
# enqueuer's): a task's version is the one it started on (docs/versions.md).
CLAIM_SET = (
    "interruptions = interruptions + CASE WHEN status = 'running' THEN 1 ELSE 0 END, "
    "status = 'running', owner = ?, lease_expires_at = ?, fence = fence + 1, "
    "started_at = COALESCE(started_at, ?), updated_at = ?, wake_at = NULL, "
    "version = CASE WHEN started_at IS NULL THEN COALESCE(?, version) ELSE version END, "
    # The step the last owner was in is not this attempt's (schema 9).
    "step_now_seq = NULL, step_now = NULL, step_now_at = NULL"
)
# {filter} picks the candidates (one batch, or any batch of some task names);
# {lock} is where a backend that can adds FOR UPDATE SKIP LOCKED.
# {index} is where a backend that can name the index of pending rows does so
# (SQLite's INDEXED BY), so the claim never walks finished rows however many
# there are; PostgreSQL's planner picks that partial index on its own.
NEXT_PENDING = (
    "SELECT pos FROM tasks{index} WHERE {filter} AND status = 'pending' "
    "ORDER BY priority DESC, pos LIMIT 1{lock}"
)
CLAIM_NEXT = (
    f"UPDATE tasks SET {CLAIM_SET} WHERE pos = ({NEXT_PENDING}) "
    f"AND status = 'pending' RETURNING {TASK_COLUMNS}"
)
# Fair claims (a worker serving every batch, docs/workers.md): at the highest
# pending priority among the candidates (the inner probe, of tasks_pending), the
# first task of the first batch after ``?`` (the batch this process claimed from
# last), by name: one seek of tasks_pending_fair (priority DESC, batch, pos).
# {top_index} names tasks_pending and {index} tasks_pending_fair where the
# backend names indexes. A task of no batch is never found here; the claim
# of the oldest task (CLAIM_NEXT), tried when this finds none, takes it.
NEXT_FAIR = (
    "SELECT pos FROM tasks{index} WHERE {filter} AND status = 'pending' AND batch > ? "
    "AND priority = (SELECT priority FROM tasks{top_index} WHERE {filter} "
    "AND status = 'pending' ORDER BY priority DESC, pos LIMIT 1) "
    "ORDER BY priority DESC, batch, pos LIMIT 1{lock}"
)
CLAIM_FAIR = (
    f"UPDATE tasks SET {CLAIM_SET} WHERE pos = ({NEXT_FAIR}) "
    f"AND status = 'pending' RETURNING {TASK_COLUMNS}"
)
# A waiting task whose timeout has passed is taken up like a pending one.
NEXT_DUE = (
    "SELECT pos FROM tasks WHERE status = 'waiting' AND wake_at <= ? AND {filter} "
    "ORDER BY wake_at LIMIT 1{lock}"
)
CLAIM_DUE = (
    f"UPDATE tasks SET {CLAIM_SET} WHERE pos = ({NEXT_DUE}) "
    f"AND status = 'waiting' RETURNING {TASK_COLUMNS}"
)
# Taking one task by id, compare-and-set on the fence the claimer read. A running
# task is taken only if the claimer knows its owner is gone (the first ?, 1), or
# if its lease expired before the second ?: checked here, in the same statement,
# so a renewal that lands between the claimer's look and its claim wins.
CLAIM_TASK = (
    f"UPDATE tasks SET {CLAIM_SET} WHERE id = ? AND fence = ? AND (status = 'pending' "
    "OR (status = 'running' AND (? = 1 OR lease_expires_at < ?)) "
    "OR (status = 'waiting' AND wake_at <= ?)) "
    f"RETURNING {TASK_COLUMNS}"
)
# The task a claim took, found by a claim run again after its answer was lost
# (SQLCore._write_once): running under this owner, claimed at this very stamp
# (of this batch or these names: {filter}); by id, also at the fence the claim
# moved it to. A process makes one claim at a time (engine.owners.claim_lock),
# each at a later stamp, so no other claim of its own matches; the engine
# never takes for its own a task one of its threads runs (engine.claim._hold).
OWN_CLAIM = (
    f"SELECT {TASK_COLUMNS} FROM tasks WHERE owner = ? AND status = 'running' "
    "AND updated_at = ? AND {filter} ORDER BY pos LIMIT 1"
)
OWN_CLAIM_OF = (
    f"SELECT {TASK_COLUMNS} FROM tasks WHERE id = ? AND fence = ? AND owner = ? "
    "AND status = 'running' AND updated_at = ?"
)
# Orphans: running tasks whose lease expired before ?, oldest expiry first
# (through the partial index of running rows by lease).
EXPIRED_RUNNING = (
    f"SELECT {TASK_COLUMNS} FROM tasks WHERE status = 'running' AND lease_expires_at < ? "
    "AND {filter} ORDER BY lease_expires_at LIMIT ?"
)
# The owners of running tasks (one row per process), to look for dead ones.
RUNNING_OWNERS = "SELECT DISTINCT owner FROM tasks WHERE status = 'running' AND {filter}"
OWNED_RUNNING = (
    f"SELECT {TASK_COLUMNS} FROM tasks WHERE status = 'running' AND owner = ? "
    "AND {filter} ORDER BY pos LIMIT ?"
)
# Suspend a running task (ctx.wait_for) unless the signal it waits for is there
# already: checked in the same statement, so a signal sent at any moment either
# is seen here or finds the task waiting and wakes it.
SUSPEND = (
    "UPDATE tasks SET status = 'waiting', wake_at = ?, owner = NULL, "
    "lease_expires_at = NULL, updated_at = ? "
    "WHERE id = ? AND fence = ? AND status = 'running' "
    "AND NOT EXISTS (SELECT 1 FROM signals WHERE task_id = ? AND name = ?)"
)
# What a suspend leaves, found by a suspend run again after its answer was lost
# (SQLCore._write_once): the task at this very fence without an owner, waiting
# (or pending, if a signal woke it meanwhile). No other write leaves that: a
# claim sets an owner, a release or a cancel moves the fence, a finish is final.
OWN_SUSPEND = (
    "SELECT 1 FROM tasks WHERE id = ? AND fence = ? AND owner IS NULL "
    "AND (status = 'waiting' OR status = 'pending')"
)
INSERT_SIGNAL = (
    "INSERT INTO signals (task_id, name, payload, codec, sent_at) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (task_id, name) DO NOTHING"
)
# This very signal (its payload, codec and stamp), found by a send run again
# after its answer was lost.
OWN_SIGNAL = (
    "SELECT 1 FROM signals WHERE task_id = ? AND name = ? AND payload = ? AND codec = ? "
    "AND sent_at = ?"
)
# A singleton task made pending again holds its key again, or the key it was
# queued behind: the store's unique index refuses it while another holds it
# (docs/debounce.md), so a retry or a rerun never makes two.
TAKE_KEY = "singleton_key = COALESCE(singleton_key, singleton_queued), singleton_queued = NULL"
# A signal wakes its task if the task is waiting (for it or for anything: the
# task looks again at what it waits for, and waits again if it must); not a
# task queued behind a singleton key's holder, which runs only once it holds the
# key (the signal is kept for it).
WAKE = (
    "UPDATE tasks SET status = 'pending', wake_at = NULL, updated_at = ? "
    "WHERE id = ? AND status = 'waiting' AND singleton_queued IS NULL"
)
GET_SIGNAL = "SELECT payload, codec, sent_at FROM signals WHERE task_id = ? AND name = ?"
# The heartbeat: every running task of one owner; the answer says which (and
# under which fence), so the owner knows each lease it still holds.
RENEW = (
    "UPDATE tasks SET lease_expires_at = ? WHERE owner = ? AND status = 'running' "
    "RETURNING id, fence"
)
# One task's lease, renewed at once before an outside call (fenced).
RENEW_TASK = (
    "UPDATE tasks SET lease_expires_at = ? WHERE id = ? AND fence = ? AND status = 'running'"
)
# The entry a running task is in now (cairn.engine.leases notes it at a beat),
# fenced: a note from an owner that lost the task changes nothing. Not a
# checkpoint: updated_at stays, so a task stuck in one step still stalls.
NOTE_IN_FLIGHT = (
    "UPDATE tasks SET step_now_seq = ?, step_now = ?, step_now_at = ? "
    "WHERE id = ? AND fence = ? AND status = 'running'"
)
# A task's kept log records (schema 9; cairn.engine.tasklogs).
GET_TASK_LOG = "SELECT lines, dropped FROM task_logs WHERE task_id = ?"
SAVE_TASK_LOG = (
    "INSERT INTO task_logs (task_id, lines, kept, dropped) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (task_id) DO UPDATE SET lines = excluded.lines, kept = excluded.kept, "
    "dropped = excluded.dropped"
)
# The fence moves, so the process handing the task back can write nothing more.
RELEASE = (
    "UPDATE tasks SET status = 'pending', owner = NULL, lease_expires_at = NULL, "
    "fence = fence + 1, "
    "updated_at = ? WHERE id = ? AND fence = ? AND status = 'running'"
)
# This very release (the task pending, no owner, at the next fence, at its
# stamp), found by a release run again after its answer was lost.
OWN_RELEASE = (
    "SELECT 1 FROM tasks WHERE id = ? AND fence = ? AND status = 'pending' AND owner IS NULL "
    "AND updated_at = ?"
)
START_ATTEMPT = (
    "UPDATE tasks SET attempts = ?, error = COALESCE(?, error), updated_at = ? "
    "WHERE id = ? AND fence = ?"
)
# The last two ?: this very finish (its status and stamp), found already
# written: the statement run again after its commit landed and its answer was
# lost on the way back, which must not read as the task taken from us.
FINISH = (
    "UPDATE tasks SET status = ?, result = ?, error = ?, owner = NULL, "
    "lease_expires_at = NULL, finished_at = ?, updated_at = ? "
    "WHERE id = ? AND fence = ? AND (status = 'running' "
    "OR (status = ? AND owner IS NULL AND finished_at = ?))"
)
GET_TASK = f"SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?"
BATCH_TASK_NAME = "SELECT task_name FROM batches WHERE name = ?"
BATCH_COUNTS = "SELECT status, COUNT(*) FROM tasks WHERE batch = ? GROUP BY status"

# -- history: the per-step write -------------------------------------------------
_FENCE = "EXISTS (SELECT 1 FROM tasks WHERE id = ? AND fence = ?)"
_RUNNING_FENCE = "EXISTS (SELECT 1 FROM tasks WHERE id = ? AND fence = ? AND status = 'running')"
# The first write at a position is a plain fenced insert; only a position
# written before (a retried step) pays for the upsert.
# Each write gives the entry's checksum last (entry_checksum; schema 6).
INSERT_STEP = (
    f"INSERT INTO steps ({STEP_COLUMNS}, checksum) "
    f"SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? WHERE {_FENCE}"
)
UPSERT_STEP = (
    f"{INSERT_STEP} ON CONFLICT (task_id, seq) DO UPDATE SET "
    "status = excluded.status, output = excluded.output, attempts = excluded.attempts, "
    "task_attempt = excluded.task_attempt, run_attempts = excluded.run_attempts, "
    "error = excluded.error, retry_at = excluded.retry_at, "
    "started_at = excluded.started_at, finished_at = excluded.finished_at, "
    "deferred = excluded.deferred, fingerprint = excluded.fingerprint, kept = excluded.kept, "
    "checksum = excluded.checksum"
)
# The first write of an entry whose error, retry_at, deferred and kept hold
# their defaults (a call that returned: nearly every step) names only the other
# columns: four parameters fewer to bind and store cost SQLite about a tenth of
# the write (bench/step_overhead.py). The row it writes is the same.
CLEAN_STEP_COLUMNS = tables.STEPS.listed(skip=("error", "retry_at", "deferred", "kept"))
INSERT_CLEAN_STEP = (
    f"INSERT INTO steps ({CLEAN_STEP_COLUMNS}, checksum) "
    f"SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? WHERE {_FENCE}"
)
# -- workers (schema 3): the versions each live worker claims -----------------------
NOTE_WORKER = (
    "INSERT INTO workers (owner, versions, seen_at) VALUES (?, ?, ?) "
    "ON CONFLICT (owner) DO UPDATE SET versions = excluded.versions, seen_at = excluded.seen_at"
)
FORGET_WORKER = "DELETE FROM workers WHERE owner = ?"

# A changed step under on_change='rerun': it and every later completed step run
# again; the fence is checked in the same statement.
# {also} lists further positions (model calls re-sent under rerun_models).
RERUN_STEPS = (
    "UPDATE steps SET status = 'retrying', run_attempts = 0, retry_at = NULL "
    "WHERE task_id = ? AND status = 'completed' AND ((seq >= ? AND kind = 'step'){also}) "
    f"AND {_FENCE}"
)
# The changed entry this very statement marked (to run again, from scratch),
# under the fence: found by a re-run marking run again after its answer was
# lost, which would otherwise find nothing left to mark and read as fenced out.
OWN_RERUN = (
    "SELECT 1 FROM steps WHERE task_id = ? AND seq = ? AND status = 'retrying' "
    f"AND run_attempts = 0 AND retry_at IS NULL AND {_FENCE}"
)
# The checksum last: history_of checks each row against it, then drops it.
LOAD_HISTORY = f"SELECT {STEP_COLUMNS}, checksum FROM steps WHERE task_id = ?"
# An operation a task claimed and completed is part of that task's history at
# its step_seq: the operation row is the record, so an operation costs two
# commits (claim, record) and no history row of its own.
# An operation whose entry a rerun superseded (its key done by an earlier run,
# at a position from the fork point on) is not part of the current run's
# history: it is kept among that run's superseded entries (schema 5).
LOAD_OP_HISTORY = (
    "SELECT step_seq, key, result, calls, claimed_at, completed_at, checksum FROM operations o "
    "WHERE o.task_id = ? AND o.status = 'completed' AND NOT EXISTS (SELECT 1 FROM "
    "superseded_entries e WHERE e.task_id = o.task_id AND e.seq = o.step_seq "
    "AND e.kind = 'op' AND e.name = o.key)"
)


def history_of(
    task_id: str,
    op_rows: Sequence[Sequence[Any]],
    step_rows: Sequence[tuple[Any, ...]],
    *,
    checked: bool = True,
) -> dict[int, StepRecord]:
    """A task's history from the rows of ``LOAD_OP_HISTORY`` and ``LOAD_HISTORY``;
    ``RecordCorrupt`` for a row that does not match its checksum, unless not
    ``checked`` (a rerun's fork moves entries aside without replaying them)."""
    history = {}
    for seq, key, result, calls, claimed, completed, recorded in op_rows:
        if checked and recorded is not None and recorded != op_checksum(key, result):
            raise _corrupt(task_id, (None, seq, "op", key))
        history[seq] = StepRecord(
            task_id,
            seq,
            "op",
            key,
            "completed",
            result,
            calls,
            0,
            calls,
            None,
            None,
            time_of(claimed),
            time_of(completed),
        )
    # A history row at the same position (an operation adopted from another
    # task, or written by an older cairn) is the task's own record: it wins.
    for row in step_rows:
        recorded = row[-1]
        if checked and recorded is not None and recorded != entry_checksum(row[2], row[3], row[5]):
            raise _corrupt(task_id, row)
        history[row[1]] = step_record(row[:-1])
    return history


def entry_checksum(kind: str, name: str, output: str | None) -> int:
    """The checksum written with a history entry (schema 6): CRC-32 of its kind,
    name and output. Cheap enough for every step (well under a microsecond for
    a small output); it finds a value changed on disk, not a forgery. The
    SQLite store's hot path computes the same expression inline."""
    return zlib.crc32(f"{kind}\0{name}\0{output}".encode("utf-8", "surrogatepass"))


def op_checksum(key: str, result: str | None) -> int | None:
    """The checksum written with an operation's result (schema 10): the entry
    checksum of the history entry the completed operation is; None while it
    has no result (claimed, failed), so nothing is checked."""
    return None if result is None else entry_checksum("op", key, result)


def checked_op(task_id: str, row: Sequence[Any]) -> Sequence[Any]:
    """A row of ``GET_OP`` without its trailing checksum, once its result is
    found to match it; ``RecordCorrupt`` naming the claimant's position if not."""
    *op, recorded = row
    key, result = op[1], op[8]
    if recorded is not None and recorded != op_checksum(key, result):
        raise _corrupt(op[5] or task_id, (None, op[6], "op", key))
    return op


def message_checksum(content: bytes, covers_until: int | None) -> int:
    """The checksum written with a message (schema 10): CRC-32 of its stored
    content (the bytes ``pack_content`` made) and of where a summary's cover
    ends (``covers_until``, which decides the active context). Over the stored
    bytes, one CRC call a row: a resume checks every active row, and covering
    the row's other columns (tokens, kind, meta) cost a resume of 2,000 rows
    about a fifth more in ``bench.conversation_load``; they are not covered."""
    return zlib.crc32(content, 0 if covers_until is None else covers_until + 1)


def checked_messages(
    task_id: str, conv: str, rows: Sequence[Sequence[Any]], at: tuple[int, int, int]
) -> list[Sequence[Any]]:
    """``rows`` without their trailing checksum, each found to match it;
    ``RecordCorrupt`` naming the task, the conversation and the message's index
    at the first that does not. ``at`` gives the row's positions of its index,
    content and covers_until."""
    idx, content, covers = at
    for row in rows:
        recorded = row[-1]
        if recorded is not None and recorded != message_checksum(row[content], row[covers]):
            raise corrupt_message(task_id, conv, row[idx])
    return [row[:-1] for row in rows]


def corrupt_message(task_id: str, conv: str, idx: int) -> RecordCorrupt:
    return RecordCorrupt(
        f"task {task_id!r}: message {idx} of conversation {conv!r} is corrupt: it does "
        "not match the checksum written with it, so the store was changed on disk (an "
        "edit in place, bytes written over the file, a failing disk). It was not "
        "replayed. Restore the store from a backup (`cairn backup` makes one).",
        task_id=task_id,
        seq=idx,
    )


def _corrupt(task_id: str, row: Sequence[Any]) -> RecordCorrupt:
    seq, kind, name = row[1], row[2], row[3]
    return RecordCorrupt(
        f"task {task_id!r}: the recorded {kind} {name!r} at position {seq} is corrupt: it "
        "does not match the checksum written with it, so the store was changed on disk "
        "(an edit in place, bytes written over the file, a failing disk). It was not "
        "replayed. Restore the store from a backup (`cairn backup` makes one), or, if "
        f"the step may run again, `cairn rerun {task_id} --seq {seq}`.",
        task_id=task_id,
        seq=seq,
    )


# -- operations --------------------------------------------------------------------
# A key already there is left as it is, except for this very claim (same task,
# fence, position and stamp) found written: the statement run again after its
# commit landed and its answer was lost, which must not read as somebody
# else's claim (an attempt in doubt). Its row count is then 1 again.
CLAIM_OP = (
    "INSERT INTO operations (scope, key, status, calls, permanent, task_id, step_seq, "
    "claim_fence, first_claimed_at, claimed_at, updated_at) "
    f"SELECT ?, ?, 'claimed', 1, 0, ?, ?, ?, ?, ?, ? WHERE {_FENCE} "
    "ON CONFLICT (scope, key) DO UPDATE SET claimed_at = excluded.claimed_at "
    "WHERE operations.status = 'claimed' AND operations.calls = 1 "
    "AND operations.task_id = excluded.task_id AND operations.step_seq = excluded.step_seq "
    "AND operations.claim_fence = excluded.claim_fence "
    "AND operations.claimed_at = excluded.claimed_at"
)
# A claim still standing ('claimed') is taken over only if the caller knows its
# claimant is gone (the second-to-last ?, 1), or if the claimant's task no longer
# runs under the claim's fence with a lease valid after the last ?: checked in
# the same statement, so a claimant that renewed its lease after the caller
# judged it dead keeps its claim.
RECLAIM_OP = (
    "UPDATE operations SET status = 'claimed', calls = calls + 1, permanent = 0, "
    "task_id = ?, step_seq = ?, claim_fence = ?, claimed_at = ?, updated_at = ? "
    f"WHERE scope = ? AND key = ? AND calls = ? AND status != 'completed' AND {_FENCE} "
    "AND (status != 'claimed' OR ? = 1 OR NOT EXISTS (SELECT 1 FROM tasks c "
    "WHERE c.id = operations.task_id AND c.fence = operations.claim_fence "
    "AND c.status = 'running' AND c.lease_expires_at >= ?))"
)
# This very reclaim (claim number ? by this task, fence, position and stamp),
# found by a reclaim run again after its answer was lost (SQLCore._write_once).
OWN_RECLAIM = (
    "SELECT 1 FROM operations WHERE scope = ? AND key = ? AND calls = ? AND status = 'claimed' "
    f"AND task_id = ? AND step_seq = ? AND claim_fence = ? AND claimed_at = ? AND {_FENCE}"
)
# Settling claim number ``calls`` of a key (completed by its claimant, failed, in
# doubt, or completed from a reconcile). Fenced on the settling task: a process
# that no longer owns its task changes no key (see LATE_OP). A key already in
# doubt may still be settled (its claimant, or a reconcile, knows what
# happened), as long as nobody claimed it since: ``calls`` must still match.
# The two ? before the fence: this very completion (its result and stamp)
# found written, the statement run again after its answer was lost.
SETTLE_OP = (
    "UPDATE operations SET status = ?, result = COALESCE(?, result), "
    "checksum = COALESCE(?, checksum), "
    "error = COALESCE(?, error), permanent = ?, completed_at = ?, updated_at = ? "
    "WHERE scope = ? AND key = ? AND calls = ? "
    "AND (status = 'claimed' OR status = 'in_doubt' "
    "OR (status = 'completed' AND result = ? AND updated_at = ?)) "
    f"AND {_RUNNING_FENCE}"
)
# An outcome learned by a claimant after it lost its task: kept for the audit,
# never the key's result, and nothing else about the key changes.
LATE_OP = (
    "UPDATE operations SET late_result = ?, late_at = ?, updated_at = ? WHERE scope = ? AND key = ?"
)
# The checksum last: checked_op checks the result against it, then drops it.
GET_OP = f"SELECT {OP_COLUMNS}, checksum FROM operations WHERE scope = ? AND key = ?"


# -- shared limits (cairn.limits) --------------------------------------------------------
# An acquire is one transaction: make sure the limit's row exists, lock it
# ({lock}: FOR UPDATE where the backend has row locks; SQLite's BEGIN IMMEDIATE
# already serialises writers), drop the permits that no longer count, count the
# rest, and insert ours if there is room.
ENSURE_LIMIT = "INSERT INTO limits (name) VALUES (?) ON CONFLICT (name) DO NOTHING"
# The lock also reads until when a provider's 429 closed the limit (schema 7).
LOCK_LIMIT = "SELECT closed_until FROM limits WHERE name = ?{lock}"
# A permit counts until ends_at plus the window (zero for a concurrency limit).
DROP_SPENT_PERMITS = "DELETE FROM permits WHERE limit_name = ? AND ends_at <= ?"
HAS_PERMIT = "SELECT 1 FROM permits WHERE limit_name = ? AND permit = ?"
# A keyed limit (cairn.limits: "name<US>key") now and then drops the spent permits
# of all its keys, so that a key never used again leaves no rows behind. By
# prefix, not by range: a range of text is ordered by the server's collation,
# which may not order the separator as a byte does.
DROP_SPENT_KEYED = "DELETE FROM permits WHERE substr(limit_name, 1, ?) = ? AND ends_at <= ?"
# A keyed concurrency limit's permit counts for no window once its call ends:
# it is deleted then, so the rows of a key last only while its calls run.
FORGET_PERMIT = "DELETE FROM permits WHERE limit_name = ? AND permit = ?"
# Counted permits, how many are still held, when the first ended one stops
# counting, and the amount (tokens) they hold in all.
COUNT_PERMITS = (
    "SELECT COUNT(*), COALESCE(SUM(held), 0), "
    "MIN(CASE WHEN held = 0 THEN ends_at END), COALESCE(SUM(amount), 0) "
    "FROM permits WHERE limit_name = ?"
)
INSERT_PERMIT = (
    "INSERT INTO permits (limit_name, permit, owner, task_id, held, granted_at, ends_at, amount) "
    "VALUES (?, ?, ?, ?, 1, ?, ?, ?)"
)
# A call that held an amount ended: from now on its permit counts what the
# provider reported it used (cairn.limits.TokenRate, budgets), for the window.
SETTLE_PERMIT = (
    "UPDATE permits SET held = 0, ends_at = ?, amount = ? "
    "WHERE limit_name = ? AND permit = ? AND held = 1"
)
# A provider's 429 with Retry-After: nothing more is lent until then, to anyone.
CLOSE_LIMIT = (
    "UPDATE limits SET closed_until = ? WHERE name = ? "
    "AND (closed_until IS NULL OR closed_until < ?)"
)
# The call ended: from now on the permit counts only for the window after this.
RELEASE_PERMIT = (
    "UPDATE permits SET held = 0, ends_at = ? WHERE limit_name = ? AND permit = ? AND held = 1"
)
# The heartbeat: push on the permits of calls still running in tasks this owner
# runs. A task lost or cancelled meanwhile stops renewing, so its permit ends.
HOLDS_PERMITS = "SELECT 1 FROM permits WHERE owner = ? AND held = 1 LIMIT 1"
RENEW_PERMITS = (
    "UPDATE permits SET ends_at = ? WHERE owner = ? AND held = 1 AND task_id IN "
    "(SELECT id FROM tasks WHERE owner = ? AND status = 'running')"
)


# -- schedules (cairn.schedule) -----------------------------------------------------
SCHEDULE_COLUMNS = tables.SCHEDULES.listed()
INSERT_SCHEDULE = (
    f"INSERT INTO schedules ({SCHEDULE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (name) DO NOTHING"
)
GET_SCHEDULE = f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE name = ?"
# Compare-and-set on covered_until: of several workers that read the same row,
# only the first to write moves it; the others change nothing and read again.
ADVANCE_SCHEDULE = (
    "UPDATE schedules SET task_name = ?, cron = ?, tz = ?, covered_until = ?, "
    "last_fired_at = COALESCE(?, last_fired_at), updated_at = ? "
    "WHERE name = ? AND covered_until = ?"
)

# The schedule as this very advance left it (its new covered_until, at its
# stamp), found by an advance run again after its answer was lost.
ADVANCED_AT = "SELECT 1 FROM schedules WHERE name = ? AND covered_until = ? AND updated_at = ?"


# -- stored times -----------------------------------------------------------------------
def time_of(value: Any) -> datetime:
    """A stored time as an aware UTC datetime, from ISO text or a datetime."""
    if isinstance(value, datetime):
        return value if value.tzinfo is UTC else value.astimezone(UTC)
    return from_iso(value)


def opt_time(value: Any) -> datetime | None:
    return None if value is None else time_of(value)


# -- conversations (cairn.agent) ---------------------------------------------------------
# A conversation's integer key, resolved once when it is opened: looked up, and
# created (under the fence) only the first time. Two openers racing both insert;
# one row wins and both then read its key.
FIND_CONVERSATION = "SELECT conv_id FROM conversations WHERE task_id = ? AND name = ?"
INSERT_CONVERSATION = (
    f"INSERT INTO conversations (task_id, name) SELECT ?, ? WHERE {_FENCE} "
    "ON CONFLICT (task_id, name) DO NOTHING"
)
# A record names its conversation by (task, name), not by the conversation's key.
MESSAGE_COLUMNS = tables.MESSAGES.listed(skip=("conv_id",))
# An append is one fenced insert: one statement, one commit, and a row count of 0
# means the fence moved.
INSERT_MESSAGE = (
    f"INSERT INTO messages (conv_id, {MESSAGE_COLUMNS}, checksum) "
    f"SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ? WHERE {_FENCE}"
)
# Reads name the conversation by (task, name); the key is one probe of the
# conversations table's unique index.
_CONV_ID = f"({FIND_CONVERSATION})"
# The active context: row 0 (the system prompt) and every row after the latest
# summary's covers_until (the summary itself among them). The latest summary is
# one probe of the partial index, and the rest is a range of the primary key, so
# the read costs O(active rows) however long the conversation has grown.
# Each read gives the checksum last (checked_messages).
LOAD_ACTIVE_MESSAGES = (
    f"SELECT {MESSAGE_COLUMNS}, checksum FROM messages WHERE conv_id = {_CONV_ID} AND idx = 0 "
    "UNION ALL "
    f"SELECT {MESSAGE_COLUMNS}, checksum FROM messages WHERE conv_id = {_CONV_ID} AND idx > "
    f"COALESCE((SELECT covers_until FROM messages WHERE conv_id = {_CONV_ID} "
    "AND kind = 'summary' ORDER BY idx DESC LIMIT 1), 0) "
    "ORDER BY idx"
)
# The same rows, in the columns a resume reads (the role is in the content's format
# byte or its JSON).
ACTIVE_ROW_COLUMNS = "idx, content, tokens, kind, covers_until, meta"
# Where checked_messages finds what a message's checksum covers in a row of
# MESSAGE_COLUMNS (a resume's ACTIVE_ROW_COLUMNS are checked in their own loop).
MESSAGE_CHECKED_AT = (0, 2, 5)
LOAD_ACTIVE_ROWS = LOAD_ACTIVE_MESSAGES.replace(MESSAGE_COLUMNS, ACTIVE_ROW_COLUMNS)
LOAD_MESSAGES = (
    f"SELECT {MESSAGE_COLUMNS}, checksum FROM messages WHERE conv_id = {_CONV_ID} AND idx >= ? "
    "ORDER BY idx LIMIT ?"
)


# A message's created_at is stored as integer microseconds since the epoch (UTC):
# 8 bytes or fewer, where ISO text takes 32 on every row of a long conversation.
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def micros_of(moment: datetime) -> int:
    """``moment`` (tz-aware) as whole microseconds since the epoch."""
    if moment.tzinfo is None:
        raise ValueError("cairn records only tz-aware datetimes")
    return (moment - _EPOCH) // _MICROSECOND


def time_of_micros(micros: int) -> datetime:
    """The aware UTC datetime ``micros_of`` made ``micros`` from."""
    return _EPOCH + timedelta(microseconds=micros)


# A message's content is stored as bytes whose first byte says the format:
#
# * b"u", b"a", b"s": a plain user, assistant or system message, exactly
#   {"role": ..., "content": "<text>"}, stored as the UTF-8 text alone. Most rows
#   of a conversation have that shape; a resume then builds the dict without a
#   JSON parse, and the row does not carry the JSON envelope.
# * b"U", b"A", b"S": the same, the text zlib-compressed.
# * b"j": any other message, as its UTF-8 JSON; b"z": that JSON zlib-compressed.
#
# Only content of at least _COMPRESS_FROM bytes is compressed, and only when that
# makes it a fifth smaller: inflating a short message costs more CPU than parsing
# its JSON (2.5 us against 1.9 us for 400 bytes, measured), and a conversation's
# load reads every active row. A message offloaded to the blob store
# (cairn.agent.message_blobs) is stored as its reference text as it is: its first
# byte, "!", is none of the format bytes, so a reference is exact to find
# (sqlmove.BLOB_REFERENCES) and a record carries it as the text.
_PLAIN = b"j"
_ZLIB = b"z"
_REF = b"!"
_COMPRESS_FROM = 1024
_COMPRESS_LEVEL = 6
# The stored JSON is compact with non-ASCII kept (cairn.agent.messages.dumps);
# a plain message's text is recognized only if it round-trips to the same text.
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_DECODE = json.JSONDecoder().decode
_TEXT_ROLES = {
    "user": (ord("u"), ord("U")),
    "assistant": (ord("a"), ord("A")),
    "system": (ord("s"), ord("S")),
}
_TEXT_PREFIXES = tuple(
    (f'{{"role":"{role}","content":"', tags) for role, tags in _TEXT_ROLES.items()
)
_ROLE_OF = {tag: role for role, tags in _TEXT_ROLES.items() for tag in tags}
_LOWER = ord("a")  # the plain formats are lower case, their compressed ones upper
_JSON_TAG, _ZLIB_TAG, _REF_TAG = _PLAIN[0], _ZLIB[0], _REF[0]


def _plain_text(text: str) -> tuple[tuple[int, int], str] | None:
    """The format bytes and text of a plain message's JSON ``text``, or None."""
    for prefix, tags in _TEXT_PREFIXES:
        if text.startswith(prefix) and text.endswith('"}'):
            try:
                content, end = json.decoder.scanstring(text, len(prefix))  # type: ignore[attr-defined]
            except ValueError:
                return None
            if end == len(text) - 1 and _JSON.encode(content) == text[len(prefix) - 1 : -1]:
                return tags, content
            return None
    return None


def _squeezed(raw: bytes) -> bytes | None:
    """``raw`` compressed, if it is long enough and shrinks by a fifth."""
    if len(raw) < _COMPRESS_FROM:
        return None
    packed = zlib.compress(raw, _COMPRESS_LEVEL)
    return packed if len(packed) <= len(raw) * 0.8 else None


def pack_content(text: str) -> bytes:
    """A message's JSON text (or blob reference) as the bytes its ``content`` column holds."""
    if text[:1] == "!":  # message JSON is an object: it starts with "{", never "!"
        return text.encode()
    plain = _plain_text(text)
    if plain is not None:
        (tag, packed_tag), content = plain
        raw = content.encode()
        squeezed = _squeezed(raw)
        return bytes((tag,)) + raw if squeezed is None else bytes((packed_tag,)) + squeezed
    raw = text.encode()
    squeezed = _squeezed(raw)
    return _PLAIN + raw if squeezed is None else _ZLIB + squeezed


def unpack_content(stored: bytes | memoryview) -> str:
    """The JSON text (or blob reference) ``pack_content`` made ``stored`` from."""
    tag = stored[0] if stored else 0
    if tag == _JSON_TAG:
        return str(stored[1:], "utf-8")
    if tag == _ZLIB_TAG:
        return str(zlib.decompress(stored[1:]), "utf-8")
    if tag == _REF_TAG:
        return str(stored, "utf-8")
    role = _ROLE_OF.get(tag)
    if role is None:
        raise ValueError(f"unknown message content format {bytes(stored[:1])!r}")
    # A plain message: its JSON is exactly what pack_content recognized.
    text = str(stored[1:] if tag >= _LOWER else zlib.decompress(stored[1:]), "utf-8")
    return _JSON.encode({"role": role, "content": text})


def unpack_message(stored: bytes | memoryview) -> dict[str, Any] | str:
    """The message ``pack_content`` stored as ``stored``, parsed; a blob reference
    comes back as its text (``cairn.agent.message_blobs`` reads it). Written for
    speed: a resume calls it once per active row."""
    tag = stored[0] if stored else 0
    role = _ROLE_OF.get(tag)
    if role is not None:
        if tag >= _LOWER:  # b"u", b"a", b"s": the text as it is
            return {"role": role, "content": str(stored[1:], "utf-8")}
        return {"role": role, "content": str(zlib.decompress(stored[1:]), "utf-8")}
    if tag == _JSON_TAG:
        message = _DECODE(str(stored[1:], "utf-8"))
    elif tag == _ZLIB_TAG:
        message = _DECODE(str(zlib.decompress(stored[1:]), "utf-8"))
    elif tag == _REF_TAG:
        return str(stored, "utf-8")
    else:
        raise ValueError(f"unknown message content format {bytes(stored[:1])!r}")
    if not isinstance(message, dict):
        raise ValueError(f"a stored message is JSON {type(message).__name__}, not an object")
    return message


# -- rows to records ------------------------------------------------------------------
# How a record holds a stored value of each kind that needs converting, from
# what either driver returns; the other kinds are used as they come.
_READ: dict[Kind, Callable[[Any], Any]] = {
    "time": time_of,
    "micros": time_of_micros,
    "packed": unpack_content,
    "bool": bool,
}


def value_reader(column: Column) -> Callable[[Any], Any] | None:
    """What turns a stored value of ``column`` into the value a record holds
    (None: the value is used as the driver returns it)."""
    if column.kind == "time" and column.nullable:
        return opt_time
    read = _READ.get(column.kind)
    if read is not None and column.nullable:
        raise ValueError(f"cairn has no reader for a nullable {column.kind} ({column.name})")
    return read


def _fields_of(record: type[Any]) -> tuple[str, ...]:
    if dataclasses.is_dataclass(record):
        return tuple(f.name for f in dataclasses.fields(record))
    return tuple(record._fields)  # a NamedTuple


def record_reader(
    name: str,
    table: Table,
    record: type[R],
    *,
    skip: tuple[str, ...] = (),
    lead: tuple[str, ...] = (),
) -> Callable[..., R]:
    """A function ``name(*lead, row)`` that makes a ``record`` from the ``lead``
    arguments and a row of ``table.listed(skip=skip)``, each value read as its
    column's kind says. The record's fields must be those, in that order.

    The function is written out and compiled once, as namedtuple and dataclasses
    write their constructors, so a row costs what a hand-written positional
    converter costs: no loop over the columns per row (``load_history`` reads a
    task's whole history this way). Its source is its docstring.
    """
    columns = [c for c in table.carried if c.name not in skip]
    given = (*lead, *(c.name for c in columns))
    if _fields_of(record) != given:
        raise TypeError(f"{record.__name__} has fields {_fields_of(record)}, not {given}")
    namespace: dict[str, Any] = {"record": record}
    args = list(lead)
    for i, column in enumerate(columns):
        read = value_reader(column)
        if read is None:
            args.append(f"row[{i}]")
        else:
            namespace[read.__name__] = read
            args.append(f"{read.__name__}(row[{i}])")
    source = f"def {name}({', '.join((*lead, 'row'))}):\n    return record({', '.join(args)})\n"
    exec(source, namespace)  # noqa: S102 - the source is built from the table description only
    function: Callable[..., R] = namespace[name]
    function.__doc__ = source
    function.__module__ = __name__
    return function


task_record: Callable[[tuple[Any, ...]], TaskRecord] = record_reader(
    "task_record", tables.TASKS, TaskRecord
)
step_record: Callable[[tuple[Any, ...]], StepRecord] = record_reader(
    "step_record", tables.STEPS, StepRecord
)
op_record: Callable[[tuple[Any, ...]], OperationRecord] = record_reader(
    "op_record", tables.OPERATIONS, OperationRecord
)
schedule_record: Callable[[tuple[Any, ...]], ScheduleRecord] = record_reader(
    "schedule_record", tables.SCHEDULES, ScheduleRecord
)
# A row of MESSAGE_COLUMNS of conversation ``conv`` of ``task_id``.
message_record: Callable[[str, str, tuple[Any, ...]], MessageRecord] = record_reader(
    "message_record", tables.MESSAGES, MessageRecord, skip=("conv_id",), lead=("task_id", "conv")
)
