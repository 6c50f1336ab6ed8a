"""The engine's side of the store contract, implemented once over SQL for every
SQL backend (``cairn.store.protocol.Store``).

A backend supplies the primitives of ``cairn.store.sqlcore``; everything else,
and all of the SQL (``cairn.store.sql``), is shared, so the backends cannot
drift apart in meaning. ``SQLStore`` also carries the admin side
(``cairn.store.sqladmin``, ``cairn.store.sqltransfer``), so a SQL store is an
``AdminStore`` too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from functools import partial
from itertools import islice
from typing import Any, NamedTuple

from cairn.store import sql
from cairn.store.driver_errors import DuplicateRow, unstorable_text
from cairn.store.records import (
    ActiveRow,
    InFlightNote,
    MessageRecord,
    NewTask,
    OperationClaim,
    OperationRecord,
    PermitRefused,
    ScheduleRecord,
    SignalRecord,
    StepRecord,
    TaskRecord,
)
from cairn.store.sqladmin import SQLAdmin
from cairn.store.sqlbudgets import SQLBudgets
from cairn.store.sqlcore import Tx
from cairn.store.sqlgates import SQLGates
from cairn.store.sqlruns import SQLRuns
from cairn.store.sqltransfer import SQLTransfer

ENQUEUE_CHUNK = 500
# The answer to a claim that was granted: frozen, so one serves every claim.
CLAIMED = OperationClaim(claimed=True, record=None)


class ClaimStatement(NamedTuple):
    """One way to claim the next task: the claiming statement and its parameters,
    the read that finds its candidate without claiming it, and the read that
    finds the task it claimed (its answer lost: ``SQLCore._write_once``)."""

    statement: str
    params: list[Any]
    probe: tuple[str, list[Any]]
    own: tuple[str, list[Any]]


def task_row(task: NewTask, stamp: Any) -> tuple[Any, ...]:
    """The parameters of ``sql.INSERT_TASK`` for one new task."""
    return (
        task.id,
        task.batch,
        task.item_key,
        task.name,
        task.args,
        task.codec,
        stamp,
        stamp,
        task.parent_id,
        task.version,
        task.priority,
    )


def _write_chunk(
    batch_rows: list[tuple[Any, ...]],
    task_rows: list[tuple[Any, ...]],
    announce: str | None,
    tx: Tx,
) -> int:
    tx.exec_many(sql.INSERT_BATCH, batch_rows)
    inserted = tx.exec_many(sql.INSERT_TASK, task_rows)
    if inserted and announce:
        tx.exec(announce)  # idle workers wake at commit instead of at their next poll
    return inserted


def _made_at(stamp: Any, ids: list[str], tx: Tx) -> int | None:
    """How many of ``ids`` were created at ``stamp`` (None: none): what an
    enqueue whose answer was lost finds it made, on its try again."""
    statement = sql.ENQUEUED_AT.format(ids=", ".join("?" for _ in ids))
    made = int(tx.exec(statement, (stamp, *ids)).rows[0][0])
    return made or None


def clean_step(step: StepRecord) -> bool:
    """True if ``step``'s error, retry_at, deferred and kept hold their column
    defaults, so ``sql.INSERT_CLEAN_STEP`` writes the same row as ``INSERT_STEP``."""
    return step.error is None and step.retry_at is None and not step.deferred and step.kept is None


class SQLStore(SQLAdmin, SQLTransfer, SQLRuns, SQLBudgets, SQLGates):
    """The store contract, engine and admin side, over the primitives."""

    # -- creating work -------------------------------------------------------------
    def ensure_batch(self, name: str, task_name: str, now: datetime) -> None:
        with self._writing():
            self._exec(sql.INSERT_BATCH, (name, task_name, self._ts(now)))

    def create_task(self, task: NewTask, now: datetime) -> bool:
        if task.parent_fence is not None and task.parent_id is not None:
            return self._create_child(task, task.parent_id, task.parent_fence, now)
        return self.enqueue([task], now) == 1

    def _create_child(self, task: NewTask, parent: str, fence: int, now: datetime) -> bool:
        """Insert a spawned child only while its parent runs under ``fence``."""
        stamp = self._ts(now)
        statement = sql.INSERT_CHILD.format(lock=self.share_lock_clause)
        params = (*task_row(task, stamp), parent, fence)
        own = (sql.OWN_CHILD, (task.id, stamp))
        with self._writing():
            return self._write_once(statement, params, own).rowcount == 1

    def enqueue(self, tasks: Iterable[NewTask], now: datetime) -> int:
        stamp = self._ts(now)
        inserted = 0
        iterator = iter(tasks)
        # Chunks keep memory flat for huge batches, and each chunk is one commit.
        while chunk := list(islice(iterator, ENQUEUE_CHUNK)):
            # A batch row is written with its first tasks, never before them: a
            # stream that fails in its first chunk leaves no empty batch.
            batches = sorted({(t.batch, t.name) for t in chunk if t.batch is not None})
            batch_rows = [(b, n, stamp) for b, n in batches]
            task_rows = [task_row(t, stamp) for t in chunk]
            with self._writing():
                write = partial(_write_chunk, batch_rows, task_rows, self.announce_work)
                made = partial(_made_at, stamp, [t.id for t in chunk])
                inserted += self._atomically_once(write, made)
        return inserted

    # -- ownership -------------------------------------------------------------------
    def _pending_index(self, batch: str | None) -> str:
        """Names the index of pending rows the next claim must use, where the
        backend lets a statement name one; "" leaves it to the planner."""
        return ""

    def _fair_indexes(self) -> tuple[str, str]:
        """As ``_pending_index``, for a fair claim: its own index (tasks_pending_fair)
        and that of its probe of the highest pending priority (tasks_pending)."""
        return "", ""

    def claim_next_pending(
        self,
        batch: str | None,
        owner: str,
        lease_until: datetime,
        now: datetime,
        *,
        names: Sequence[str] | None = None,
        versions: Sequence[str] | None = None,
        version: str | None = None,
        after_batch: str | None = None,
    ) -> TaskRecord | None:
        claims = self.claim_statements(
            batch,
            names,
            owner,
            lease_until,
            now,
            versions=versions,
            version=version,
            after_batch=after_batch,
        )
        for claim in claims:
            if self.look_before_writing:
                probe, probe_params = claim.probe
                if not self._exec(probe, probe_params).rows:
                    continue  # nothing of this kind to claim: no write taken
            with self._writing():
                rows = self._write_once(claim.statement, claim.params, claim.own).rows
            if rows:
                return sql.task_record(rows[0])
        return None

    def claim_statements(
        self,
        batch: str | None,
        names: Sequence[str] | None,
        owner: str,
        lease_until: datetime,
        now: datetime,
        *,
        versions: Sequence[str] | None = None,
        version: str | None = None,
        after_batch: str | None = None,
    ) -> list[ClaimStatement]:
        """The statements ``claim_next_pending`` tries, in order, with their
        parameters: with ``after_batch`` (a fair claim of any batch), the next
        batch's task at the highest pending priority; then the oldest pending
        task, then a waiting task whose timeout has come. (The claim-plan tests
        explain exactly these.)"""
        stamp = self._ts(now)
        claim_set = [owner, self._ts(lease_until), stamp, stamp, version]
        where, filter_params = sql.candidates(batch, names, versions)
        index = self._pending_index(batch)
        lock = self.claim_lock_clause
        pending = sql.CLAIM_NEXT.format(filter=where, lock=lock, index=index)
        next_pending = sql.NEXT_PENDING.format(filter=where, lock="", index=index)
        due = sql.CLAIM_DUE.format(filter=where, lock=lock)
        next_due = sql.NEXT_DUE.format(filter=where, lock="")
        # Versions left out: a first claim may set the claimer's own.
        mine, mine_params = sql.candidates(batch, names)
        own = (sql.OWN_CLAIM.format(filter=mine), [owner, stamp, *mine_params])
        fair = []
        if after_batch is not None and batch is None:
            fair_index, top_index = self._fair_indexes()
            indexes = {"filter": where, "index": fair_index, "top_index": top_index}
            fair_params = [*filter_params, after_batch, *filter_params]
            probe = (sql.NEXT_FAIR.format(lock="", **indexes), fair_params)
            claim = sql.CLAIM_FAIR.format(lock=lock, **indexes)
            fair.append(ClaimStatement(claim, claim_set + fair_params, probe, own))
        return [
            *fair,
            ClaimStatement(pending, claim_set + filter_params, (next_pending, filter_params), own),
            ClaimStatement(
                due, [*claim_set, stamp, *filter_params], (next_due, [stamp, *filter_params]), own
            ),
        ]

    def claim_task(
        self,
        task_id: str,
        expected_fence: int,
        owner: str,
        lease_until: datetime,
        now: datetime,
        *,
        owner_gone: bool = False,
        lapsed_before: datetime | None = None,
        version: str | None = None,
    ) -> TaskRecord | None:
        stamp = self._ts(now)
        lapsed = None if lapsed_before is None else self._ts(lapsed_before)
        params = (
            owner,
            self._ts(lease_until),
            stamp,
            stamp,
            version,
            task_id,
            expected_fence,
            int(owner_gone),
            lapsed,
            stamp,
        )
        own = (sql.OWN_CLAIM_OF, (task_id, expected_fence + 1, owner, stamp))
        with self._writing():
            rows = self._write_once(sql.CLAIM_TASK, params, own).rows
        return sql.task_record(rows[0]) if rows else None

    def expired_running(
        self,
        batch: str | None,
        names: Sequence[str] | None,
        lapsed_before: datetime,
        limit: int,
        *,
        versions: Sequence[str] | None = None,
    ) -> list[TaskRecord]:
        where, params = sql.candidates(batch, names, versions)
        statement = sql.EXPIRED_RUNNING.format(filter=where)
        rows = self._exec(statement, (self._ts(lapsed_before), *params, limit)).rows
        return [sql.task_record(r) for r in rows]

    def running_owners(
        self,
        batch: str | None,
        names: Sequence[str] | None,
        *,
        versions: Sequence[str] | None = None,
    ) -> list[str]:
        where, params = sql.candidates(batch, names, versions)
        rows = self._exec(sql.RUNNING_OWNERS.format(filter=where), params).rows
        return [str(row[0]) for row in rows if row[0] is not None]

    def has_pending(
        self,
        batch: str | None,
        names: Sequence[str] | None,
        *,
        versions: Sequence[str] | None = None,
    ) -> bool:
        where, params = sql.candidates(batch, names, versions)
        index = self._pending_index(batch)
        look = sql.NEXT_PENDING.format(filter=where, lock="", index=index)
        return bool(self._exec(look, params).rows)

    def owned_running(
        self,
        owner: str,
        batch: str | None,
        names: Sequence[str] | None,
        limit: int,
        *,
        versions: Sequence[str] | None = None,
    ) -> list[TaskRecord]:
        where, params = sql.candidates(batch, names, versions)
        statement = sql.OWNED_RUNNING.format(filter=where)
        rows = self._exec(statement, (owner, *params, limit)).rows
        return [sql.task_record(r) for r in rows]

    def renew_leases(
        self, owner: str, lease_until: datetime, *, patient: bool = True
    ) -> list[tuple[str, int]]:
        stamp = self._ts(lease_until)
        with self._writing():
            renewed = self._exec_lease(sql.RENEW, (stamp, owner), patient=patient).rows
            if not self.look_before_writing or self._exec(sql.HOLDS_PERMITS, (owner,)).rows:
                self._exec_lease(sql.RENEW_PERMITS, (stamp, owner, owner), patient=patient)
        return [(str(task_id), int(fence)) for task_id, fence in renewed]

    def renew_task(self, task_id: str, fence: int, lease_until: datetime) -> bool:
        params = (self._ts(lease_until), task_id, fence)
        with self._writing():
            return self._exec_lease(sql.RENEW_TASK, params).rowcount == 1

    def task_log(self, task_id: str) -> tuple[list[dict[str, Any]], int] | None:
        rows = self._exec(sql.GET_TASK_LOG, (task_id,)).rows
        if not rows:
            return None
        lines = json.loads(rows[0][0])
        kept = [line for line in lines if isinstance(line, dict)] if isinstance(lines, list) else []
        return kept, int(rows[0][1])

    def save_task_log(self, task_id: str, lines: Sequence[dict[str, Any]], dropped: int) -> None:
        text = json.dumps(list(lines), ensure_ascii=False)
        with self._writing():
            self._exec(sql.SAVE_TASK_LOG, (task_id, text, len(lines), dropped))

    def note_in_flight(self, notes: Sequence[InFlightNote]) -> None:
        with self._writing():
            for note in notes:
                params = (note.seq, note.name, self._ts(note.started_at), note.task_id, note.fence)
                self._exec_lease(sql.NOTE_IN_FLIGHT, params, patient=False)

    def release_task(
        self, task_id: str, fence: int, now: datetime, *, patient: bool = True
    ) -> bool:
        params = (self._ts(now), task_id, fence)
        own = (sql.OWN_RELEASE, (task_id, fence + 1, params[0]))
        with self._writing():
            return self._write_once(sql.RELEASE, params, own, patient=patient).rowcount == 1

    # -- waiting and signals --------------------------------------------------------------
    def suspend_task(
        self, task_id: str, fence: int, signal: str, wake_at: datetime | None, now: datetime
    ) -> bool:
        wake = None if wake_at is None else self._ts(wake_at)
        params = (wake, self._ts(now), task_id, fence, task_id, signal)
        own = (sql.OWN_SUSPEND, (task_id, fence))
        with self._writing():
            return self._write_once(sql.SUSPEND, params, own).rowcount == 1

    def send_signal(self, task_id: str, name: str, payload: str, codec: str, now: datetime) -> bool:
        row = (task_id, name, payload, codec, self._ts(now))

        def send(tx: Tx) -> bool:
            sent = tx.exec(sql.INSERT_SIGNAL, row).rowcount
            woken = tx.exec(sql.WAKE, (row[-1], task_id)).rowcount
            if woken and self.announce_work:
                tx.exec(self.announce_work)
            return sent == 1

        def sent_before(tx: Tx) -> bool | None:
            return True if tx.exec(sql.OWN_SIGNAL, row).rows else None

        with self._writing():
            return self._atomically_once(send, sent_before)

    def get_signal(self, task_id: str, name: str) -> SignalRecord | None:
        rows = self._exec(sql.GET_SIGNAL, (task_id, name)).rows
        if not rows:
            return None
        payload, codec, sent_at = rows[0]
        return SignalRecord(task_id, name, payload, codec, sql.time_of(sent_at))

    # -- the fenced write path -----------------------------------------------------------
    def load_history(self, task_id: str) -> dict[int, StepRecord]:
        return sql.history_of(
            task_id,
            self._exec(sql.LOAD_OP_HISTORY, (task_id,)).rows,
            self._exec(sql.LOAD_HISTORY, (task_id,)).rows,
        )

    def _step_params(self, step: StepRecord, fence: int) -> tuple[Any, ...]:
        return (
            step.task_id,
            step.seq,
            step.kind,
            step.name,
            step.status,
            step.output,
            step.attempts,
            step.task_attempt,
            step.run_attempts,
            step.error,
            None if step.retry_at is None else self._ts(step.retry_at),
            self._ts(step.started_at),
            self._ts(step.finished_at),
            step.deferred,
            step.fingerprint,
            step.kept,
            sql.entry_checksum(step.kind, step.name, step.output),
            step.task_id,
            fence,
        )

    def _clean_step_params(self, step: StepRecord, fence: int) -> tuple[Any, ...]:
        """The parameters of ``sql.INSERT_CLEAN_STEP``, for a ``clean_step``."""
        return (
            step.task_id,
            step.seq,
            step.kind,
            step.name,
            step.status,
            step.output,
            step.attempts,
            step.task_attempt,
            step.run_attempts,
            self._ts(step.started_at),
            self._ts(step.finished_at),
            step.fingerprint,
            sql.entry_checksum(step.kind, step.name, step.output),
            step.task_id,
            fence,
        )

    def _step_insert(self, step: StepRecord, fence: int) -> tuple[str, tuple[Any, ...]]:
        """The fenced insert of ``step`` at a new position, and its parameters."""
        if clean_step(step):
            return sql.INSERT_CLEAN_STEP, self._clean_step_params(step, fence)
        return sql.INSERT_STEP, self._step_params(step, fence)

    def record_step(self, step: StepRecord, fence: int, *, first: bool = False) -> bool:
        with self._writing():
            if first:
                insert, params = self._step_insert(step, fence)
                try:
                    return self._exec(insert, params).rowcount == 1
                except DuplicateRow:
                    pass  # the position was written after all: fall back to the upsert
            return self._exec(sql.UPSERT_STEP, self._step_params(step, fence)).rowcount == 1

    def note_worker(self, owner: str, versions: str, now: datetime) -> None:
        with self._writing():
            self._exec(sql.NOTE_WORKER, (owner, versions, self._ts(now)))

    def forget_worker(self, owner: str) -> None:
        with self._writing():
            self._exec(sql.FORGET_WORKER, (owner,))

    def rerun_steps(
        self, task_id: str, from_seq: int, fence: int, also: Sequence[int] = ()
    ) -> bool:
        positions = "".join(" OR seq = ?" for _ in also)
        statement = sql.RERUN_STEPS.format(also=positions)
        own = (sql.OWN_RERUN, (task_id, from_seq, task_id, fence))
        with self._writing():
            params = (task_id, from_seq, *also, task_id, fence)
            rerun = self._write_once(statement, params, own).rowcount
        return rerun > 0

    def start_attempt(
        self, task_id: str, fence: int, attempts: int, error: str | None, now: datetime
    ) -> bool:
        params = (attempts, error, self._ts(now), task_id, fence)
        with self._writing():
            return self._exec(sql.START_ATTEMPT, params).rowcount == 1

    def finish_task(
        self,
        task_id: str,
        fence: int,
        status: str,
        result: str | None,
        error: str | None,
        now: datetime,
    ) -> bool:
        stamp = self._ts(now)
        params = (status, result, error, stamp, stamp, task_id, fence, status, stamp)
        with self._writing():
            return self._exec(sql.FINISH, params).rowcount == 1

    # -- reading --------------------------------------------------
    def get_task(self, task_id: str) -> TaskRecord | None:
        rows = self._exec(sql.GET_TASK, (task_id,)).rows
        return sql.task_record(rows[0]) if rows else None

    def batch_task_name(self, batch: str) -> str | None:
        rows = self._exec(sql.BATCH_TASK_NAME, (batch,)).rows
        return str(rows[0][0]) if rows else None

    def batch_counts(self, batch: str) -> Mapping[str, int]:
        return {str(status): int(n) for status, n in self._exec(sql.BATCH_COUNTS, (batch,)).rows}

    # -- operations ----------------------------------------------------------------------
    def claim_operation(
        self, scope: str, key: str, task_id: str, seq: int, fence: int, now: datetime
    ) -> OperationClaim:
        stamp = self._ts(now)
        params = (scope, key, task_id, seq, fence, stamp, stamp, stamp, task_id, fence)
        with self._writing():
            if self._exec(sql.CLAIM_OP, params).rowcount == 1:
                return CLAIMED
            existing = self.get_operation(scope, key)
        return OperationClaim(claimed=False, record=existing, fenced_out=existing is None)

    def reclaim_operation(
        self,
        scope: str,
        key: str,
        expected_calls: int,
        task_id: str,
        seq: int,
        fence: int,
        now: datetime,
        *,
        claimant_gone: bool = False,
        lapsed_before: datetime | None = None,
    ) -> OperationClaim:
        stamp = self._ts(now)
        lapsed = self._ts(now if lapsed_before is None else lapsed_before)
        params = (
            task_id,
            seq,
            fence,
            stamp,
            stamp,
            scope,
            key,
            expected_calls,
            task_id,
            fence,
            int(claimant_gone),
            lapsed,
        )
        mine = (scope, key, expected_calls + 1, task_id, seq, fence, stamp, task_id, fence)
        with self._writing():
            if self._write_once(sql.RECLAIM_OP, params, (sql.OWN_RECLAIM, mine)).rowcount == 1:
                return OperationClaim(claimed=True, record=None)
        return OperationClaim(claimed=False, record=self.get_operation(scope, key))

    def _settle_params(
        self,
        scope: str,
        key: str,
        calls: int,
        status: str,
        result: str | None,
        error: str | None,
        permanent: bool,
        now: datetime,
        task_id: str,
        fence: int,
    ) -> tuple[Any, ...]:
        stamp = self._ts(now)
        completed_at = stamp if status == "completed" else None
        return (
            status,
            result,
            sql.op_checksum(key, result),
            error,
            int(permanent),
            completed_at,
            stamp,
            scope,
            key,
            calls,
            result,  # this very completion, found written (a retried statement)
            stamp,
            task_id,
            fence,
        )

    def complete_operation(
        self, scope: str, key: str, calls: int, result: str, step: StepRecord, fence: int
    ) -> bool:
        # The operation row is also the task's history entry (see load_history),
        # so this is one statement, fenced on the claiming task: a claimant that
        # lost its task records its outcome only as late (record_late_result).
        settle = self._settle_params(
            scope,
            key,
            calls,
            "completed",
            result,
            None,
            False,
            step.finished_at,
            step.task_id,
            fence,
        )
        with self._writing():
            return self._exec(sql.SETTLE_OP, settle).rowcount == 1

    def settle_operation(
        self,
        scope: str,
        key: str,
        calls: int,
        status: str,
        *,
        error: str | None,
        permanent: bool,
        now: datetime,
        task_id: str,
        fence: int,
        result: str | None = None,
    ) -> bool:
        params = self._settle_params(
            scope, key, calls, status, result, error, permanent, now, task_id, fence
        )
        with self._writing():
            return self._exec(sql.SETTLE_OP, params).rowcount == 1

    def record_late_result(self, scope: str, key: str, result: str, now: datetime) -> bool:
        stamp = self._ts(now)
        with self._writing():
            return self._exec(sql.LATE_OP, (result, stamp, stamp, scope, key)).rowcount == 1

    def get_operation(self, scope: str, key: str) -> OperationRecord | None:
        rows = self._exec(sql.GET_OP, (scope, key)).rows
        return sql.op_record(tuple(sql.checked_op(scope, rows[0]))) if rows else None

    # -- shared limits (cairn.limits) ----------------------------------------------------
    def acquire_permit(
        self,
        limit: str,
        capacity: int,
        window: timedelta,
        permit: str,
        owner: str,
        task_id: str,
        now: datetime,
        lease_until: datetime,
        *,
        amount: int = 0,
        amount_capacity: int | None = None,
        lock_row: str | None = None,
        sweep: str | None = None,
    ) -> PermitRefused | None:
        spent_before = self._ts(now - window)
        lock = sql.LOCK_LIMIT.format(lock=self.row_lock_clause)
        locked = limit if lock_row is None else lock_row

        def take(tx: Tx) -> PermitRefused | None:
            tx.exec(sql.ENSURE_LIMIT, (locked,))
            closed = tx.exec(lock, (locked,)).rows[0][0]
            if tx.exec(sql.HAS_PERMIT, (limit, permit)).rows:
                return None  # a retried transaction whose first try committed
            if closed is not None and sql.time_of(closed) > now:
                return PermitRefused(0, sql.time_of(closed))
            if sweep is not None:
                tx.exec(sql.DROP_SPENT_KEYED, (len(sweep), sweep, spent_before))
            tx.exec(sql.DROP_SPENT_PERMITS, (limit, spent_before))
            counted, held, first_ended, total = tx.exec(sql.COUNT_PERMITS, (limit,)).rows[0]
            room = amount_capacity is None or int(total) + amount <= amount_capacity
            if counted < capacity and room:
                params = (
                    limit, permit, owner, task_id, self._ts(now), self._ts(lease_until), amount
                )  # fmt: skip
                tx.exec(sql.INSERT_PERMIT, params)
                return None
            frees_at = None if first_ended is None else sql.time_of(first_ended) + window
            return PermitRefused(int(held), frees_at)

        with self._writing():
            return self._atomically(take)

    def release_permit(
        self, limit: str, permit: str, now: datetime, *, forget: bool = False
    ) -> None:
        with self._writing():
            if forget:
                self._exec(sql.FORGET_PERMIT, (limit, permit))
            else:
                self._exec(sql.RELEASE_PERMIT, (self._ts(now), limit, permit))

    def settle_permit(self, limit: str, permit: str, amount: int, now: datetime) -> None:
        with self._writing():
            self._exec(sql.SETTLE_PERMIT, (self._ts(now), amount, limit, permit))

    def close_limit(self, limit: str, until: datetime) -> None:
        stamp = self._ts(until)
        with self._writing():
            self._exec(sql.ENSURE_LIMIT, (limit,))
            self._exec(sql.CLOSE_LIMIT, (stamp, limit, stamp))

    # -- conversations (cairn.agent) -------------------------------------------------------
    def open_conversation(self, task_id: str, name: str, fence: int) -> int | None:
        found = self._exec(sql.FIND_CONVERSATION, (task_id, name)).rows
        if found:
            return int(found[0][0])
        with self._writing():
            # A rival opener may insert first: ours then does nothing, and the
            # read below finds the rival's row. Nothing found means the fence moved.
            self._exec(sql.INSERT_CONVERSATION, (task_id, name, task_id, fence))
            found = self._exec(sql.FIND_CONVERSATION, (task_id, name)).rows
        return int(found[0][0]) if found else None

    def _message_params(self, conv_id: int, message: MessageRecord, fence: int) -> tuple[Any, ...]:
        try:
            content = sql.pack_content(message.content)  # encoded here, not by the driver
        except UnicodeEncodeError as exc:
            raise unstorable_text(exc) from exc
        return (
            conv_id,
            message.idx,
            message.role,
            content,
            message.tokens,
            message.kind,
            message.covers_until,
            message.meta,
            sql.micros_of(message.created_at),
            sql.message_checksum(content, message.covers_until),
            message.task_id,
            fence,
        )

    def append_message(self, conv_id: int, message: MessageRecord, fence: int) -> bool:
        params = self._message_params(conv_id, message, fence)
        with self._writing():
            try:
                return self._exec(sql.INSERT_MESSAGE, params).rowcount == 1
            except DuplicateRow:
                if self._written_already([message]):
                    return True
                raise

    def append_messages(self, conv_id: int, messages: Sequence[MessageRecord], fence: int) -> bool:
        rows = [self._message_params(conv_id, m, fence) for m in messages]

        def write(tx: Tx) -> bool:
            for params in rows:
                if tx.exec(sql.INSERT_MESSAGE, params).rowcount != 1:
                    raise _FencedOut  # roll back the rows written so far
            return True

        with self._writing():
            try:
                return self._atomically(write)
            except _FencedOut:
                return False
            except DuplicateRow:
                if self._written_already(messages):
                    return True
                raise

    def _written_already(self, messages: Sequence[MessageRecord]) -> bool:
        """Whether ``messages`` (consecutive rows of one conversation) are stored
        exactly as given: what a retried write finds when its first try committed
        and then the connection dropped before the answer (``pgpool`` runs a write
        again on a new connection). Rows written in one transaction are all there
        or none are; any other row at those positions is a real clash."""
        first = messages[0]
        found = self.load_messages(first.task_id, first.conv, first.idx, len(messages))
        return [(r.idx, r.content) for r in found] == [(m.idx, m.content) for m in messages]

    def load_active_messages(self, task_id: str, conv: str) -> list[MessageRecord]:
        params = (task_id, conv) * 3
        rows = self._exec(sql.LOAD_ACTIVE_MESSAGES, params).rows
        return self._message_records(task_id, conv, rows)

    def load_active_rows(self, task_id: str, conv: str) -> list[ActiveRow]:
        rows = self._exec(sql.LOAD_ACTIVE_ROWS, (task_id, conv) * 3).rows
        # One pass, checked as it goes: a resume reads every active row.
        unpack, check = sql.unpack_message, sql.message_checksum
        loaded: list[ActiveRow] = []
        for idx, content, tokens, kind, covers, meta, recorded in rows:
            if recorded is not None and recorded != check(content, covers):
                raise sql.corrupt_message(task_id, conv, idx)
            loaded.append((idx, unpack(content), tokens, kind, covers, meta))
        return loaded

    def load_messages(self, task_id: str, conv: str, start: int, limit: int) -> list[MessageRecord]:
        rows = self._exec(sql.LOAD_MESSAGES, (task_id, conv, start, limit)).rows
        return self._message_records(task_id, conv, rows)

    def _message_records(
        self, task_id: str, conv: str, rows: Sequence[Sequence[Any]]
    ) -> list[MessageRecord]:
        checked = sql.checked_messages(task_id, conv, rows, sql.MESSAGE_CHECKED_AT)
        return [sql.message_record(task_id, conv, tuple(r)) for r in checked]

    # -- schedules (cairn.schedule) ----------------------------------------------------------
    def add_schedule(self, schedule: ScheduleRecord) -> bool:
        params = (
            schedule.name,
            schedule.task_name,
            schedule.cron,
            schedule.tz,
            self._ts(schedule.covered_until),
            None if schedule.last_fired_at is None else self._ts(schedule.last_fired_at),
            self._ts(schedule.created_at),
            self._ts(schedule.updated_at),
        )
        with self._writing():
            return self._exec(sql.INSERT_SCHEDULE, params).rowcount == 1

    def get_schedule(self, name: str) -> ScheduleRecord | None:
        rows = self._exec(sql.GET_SCHEDULE, (name,)).rows
        return sql.schedule_record(rows[0]) if rows else None

    def advance_schedule(
        self,
        expected_covered_until: datetime,
        schedule: ScheduleRecord,
        firings: Sequence[NewTask],
        now: datetime,
    ) -> bool:
        stamp = self._ts(now)
        params = (
            schedule.task_name,
            schedule.cron,
            schedule.tz,
            self._ts(schedule.covered_until),
            None if schedule.last_fired_at is None else self._ts(schedule.last_fired_at),
            stamp,
            schedule.name,
            self._ts(expected_covered_until),
        )
        batch_rows = sorted({(t.batch, t.name, stamp) for t in firings if t.batch is not None})
        task_rows = [task_row(t, stamp) for t in firings]

        def advance(tx: Tx) -> bool:
            if tx.exec(sql.ADVANCE_SCHEDULE, params).rowcount != 1:
                return False  # another worker moved first: nothing was written
            if task_rows:
                _write_chunk(batch_rows, task_rows, self.announce_work, tx)
            return True

        def advanced_before(tx: Tx) -> bool | None:
            return True if tx.exec(sql.ADVANCED_AT, (params[6], params[3], stamp)).rows else None

        with self._writing():
            return self._atomically_once(advance, advanced_before)


class _FencedOut(Exception):
    """Raised inside a transaction to roll it back when the fence moved."""
