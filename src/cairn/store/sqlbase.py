"""One implementation of the store contract over SQL, for every SQL backend.

A backend supplies a few primitives: run one statement in its own implicit
transaction (``_exec``), run several in one transaction (``_transaction``),
turn a time into a parameter (``_ts``), and a context to hold while writing
(``_writing``: SQLite serialises a process's writers; PostgreSQL needs nothing).
Everything else, and all of the SQL (``cairn.store.sql``), is shared, so the
backends cannot drift apart in meaning.
"""

from __future__ import annotations

import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from functools import partial
from itertools import islice
from typing import Any, ClassVar, NamedTuple, Protocol, TypeVar

from cairn.store import sql
from cairn.store.driver_errors import DuplicateRow
from cairn.store.protocol import Capabilities
from cairn.store.records import (
    BatchSummary,
    ConversationSummary,
    MessageRecord,
    NewTask,
    OperationClaim,
    OperationRecord,
    PermitRefused,
    RecordedCall,
    ScheduleRecord,
    SignalRecord,
    StepRecord,
    TaskRecord,
)

T = TypeVar("T")

ENQUEUE_CHUNK = 500
PAGE = 500


class Result(NamedTuple):
    """What one statement did: rows changed, and rows returned."""

    rowcount: int
    rows: list[tuple[Any, ...]]


class ClaimStatement(NamedTuple):
    """One way to claim the next task: the claiming statement and its parameters,
    and the read that finds its candidate without claiming it."""

    statement: str
    params: list[Any]
    probe: tuple[str, list[Any]]


class Tx(Protocol):
    """Statements inside one transaction."""

    def exec(self, statement: str, params: Sequence[Any] = ()) -> Result: ...

    def exec_many(self, statement: str, rows: Iterable[Sequence[Any]]) -> int:
        """Run ``statement`` once per row; return the rows it changed."""
        ...


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


class SQLStore(ABC):
    """The store contract, implemented once over the primitives below."""

    url: str
    identity: str
    capabilities: ClassVar[Capabilities]
    # Appended to the claim query's inner SELECT: FOR UPDATE SKIP LOCKED where
    # the backend has row locks, so concurrent claimers never wait on each other.
    claim_lock_clause: ClassVar[str] = ""
    # Appended to the read of a limit's row in an acquire: FOR UPDATE where the
    # backend has row locks (SQLite's BEGIN IMMEDIATE already serialises writers).
    row_lock_clause: ClassVar[str] = ""
    # A statement that wakes idle workers when new tasks are committed, if the
    # backend can (PostgreSQL's NOTIFY); others are found by polling.
    announce_work: str | None = None

    # -- primitives each backend provides ---------------------------------------
    @abstractmethod
    def _exec(self, statement: str, params: Sequence[Any] = (), *, patient: bool = True) -> Result:
        """Run one statement as its own transaction.

        ``patient=False`` is for a caller that retries on its own schedule (the
        lease heartbeat, which must recompute its lease for each try): a backend
        that waits out lost connections gives up on the first attempt that
        cannot reach the server, raising ``StoreUnavailable``, instead of waiting
        up to its reconnect timeout."""

    @abstractmethod
    def _atomically(self, work: Callable[[Tx], T]) -> T:
        """Run ``work`` as one transaction (write-locked from the start). A backend
        may run it again after a lost connection, so ``work`` must be idempotent."""

    @abstractmethod
    def _ts(self, moment: datetime) -> Any:
        """A time as a statement parameter."""

    @abstractmethod
    def _writing(self) -> contextlib.AbstractContextManager[object]:
        """Held around every write."""

    @abstractmethod
    def close(self) -> None: ...

    def wait_for_work(self, timeout: float) -> bool:
        """Block until new work may have arrived (True), or ``timeout`` seconds
        pass (False). Without a wake-up channel, this only waits."""
        time.sleep(timeout)
        return False

    def close_thread(self) -> None:  # noqa: B027 - a no-op unless a backend pins connections
        """Release the calling thread's own connection, where there is one."""

    # -- creating work -------------------------------------------------------------
    def ensure_batch(self, name: str, task_name: str, now: datetime) -> None:
        with self._writing():
            self._exec(sql.INSERT_BATCH, (name, task_name, self._ts(now)))

    def create_task(self, task: NewTask, now: datetime) -> bool:
        return self.enqueue([task], now) == 1

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
                inserted += self._atomically(write)
        return inserted

    # -- ownership -------------------------------------------------------------------
    def _pending_index(self, batch: str | None) -> str:
        """Names the index of pending rows the next claim must use, where the
        backend lets a statement name one; "" leaves it to the planner."""
        return ""

    @staticmethod
    def _filter(batch: str | None, names: Sequence[str] | None) -> tuple[str, list[Any]]:
        """The candidates of a claim: one batch, or any batch of some task names."""
        if batch is not None:
            return "batch = ?", [batch]
        if names:
            return "(" + " OR ".join("name = ?" for _ in names) + ")", list(names)
        return "1 = 1", []

    def claim_next_pending(
        self,
        batch: str | None,
        owner: str,
        lease_until: datetime,
        now: datetime,
        *,
        names: Sequence[str] | None = None,
    ) -> TaskRecord | None:
        for claim in self.claim_statements(batch, names, owner, lease_until, now):
            if self.look_before_writing:
                probe, probe_params = claim.probe
                if not self._exec(probe, probe_params).rows:
                    continue  # nothing of this kind to claim: no write taken
            with self._writing():
                rows = self._exec(claim.statement, claim.params).rows
            if rows:
                return sql.task_record(rows[0])
        return None

    # A backend whose writers lock the whole store (SQLite) first looks with a
    # read whether there is anything to claim (or permits to renew): an idle
    # poller then takes no write lock, so it never holds one while it is paused,
    # nor queues behind writers.
    look_before_writing: ClassVar[bool] = False

    def claim_statements(
        self,
        batch: str | None,
        names: Sequence[str] | None,
        owner: str,
        lease_until: datetime,
        now: datetime,
    ) -> list[ClaimStatement]:
        """The statements ``claim_next_pending`` tries, in order, with their
        parameters: the oldest pending task, then a waiting task whose timeout
        has come. (The claim-plan tests explain exactly these.)"""
        stamp = self._ts(now)
        claim_set = [owner, self._ts(lease_until), stamp, stamp]
        where, filter_params = self._filter(batch, names)
        index = self._pending_index(batch)
        lock = self.claim_lock_clause
        pending = sql.CLAIM_NEXT.format(filter=where, lock=lock, index=index)
        next_pending = sql.NEXT_PENDING.format(filter=where, lock="", index=index)
        due = sql.CLAIM_DUE.format(filter=where, lock=lock)
        next_due = sql.NEXT_DUE.format(filter=where, lock="")
        return [
            ClaimStatement(pending, claim_set + filter_params, (next_pending, filter_params)),
            ClaimStatement(
                due, [*claim_set, stamp, *filter_params], (next_due, [stamp, *filter_params])
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
    ) -> TaskRecord | None:
        stamp = self._ts(now)
        lapsed = None if lapsed_before is None else self._ts(lapsed_before)
        params = (
            owner,
            self._ts(lease_until),
            stamp,
            stamp,
            task_id,
            expected_fence,
            int(owner_gone),
            lapsed,
            stamp,
        )
        with self._writing():
            rows = self._exec(sql.CLAIM_TASK, params).rows
        return sql.task_record(rows[0]) if rows else None

    def expired_running(
        self,
        batch: str | None,
        names: Sequence[str] | None,
        lapsed_before: datetime,
        limit: int,
    ) -> list[TaskRecord]:
        where, params = self._filter(batch, names)
        statement = sql.EXPIRED_RUNNING.format(filter=where)
        rows = self._exec(statement, (self._ts(lapsed_before), *params, limit)).rows
        return [sql.task_record(r) for r in rows]

    def running_owners(self, batch: str | None, names: Sequence[str] | None) -> list[str]:
        where, params = self._filter(batch, names)
        rows = self._exec(sql.RUNNING_OWNERS.format(filter=where), params).rows
        return [str(row[0]) for row in rows if row[0] is not None]

    def owned_running(
        self, owner: str, batch: str | None, names: Sequence[str] | None, limit: int
    ) -> list[TaskRecord]:
        where, params = self._filter(batch, names)
        statement = sql.OWNED_RUNNING.format(filter=where)
        rows = self._exec(statement, (owner, *params, limit)).rows
        return [sql.task_record(r) for r in rows]

    def running_tasks(self, batch: str | None) -> list[TaskRecord]:
        if batch is None:
            rows = self._exec(sql.RUNNING_ALL).rows
        else:
            rows = self._exec(sql.RUNNING_OF_BATCH, (batch,)).rows
        return [sql.task_record(r) for r in rows]

    def renew_leases(
        self, owner: str, lease_until: datetime, *, patient: bool = True
    ) -> list[tuple[str, int]]:
        stamp = self._ts(lease_until)
        with self._writing():
            renewed = self._exec(sql.RENEW, (stamp, owner), patient=patient).rows
            if not self.look_before_writing or self._exec(sql.HOLDS_PERMITS, (owner,)).rows:
                self._exec(sql.RENEW_PERMITS, (stamp, owner, owner), patient=patient)
        return [(str(task_id), int(fence)) for task_id, fence in renewed]

    def renew_task(self, task_id: str, fence: int, lease_until: datetime) -> bool:
        params = (self._ts(lease_until), task_id, fence)
        with self._writing():
            return self._exec(sql.RENEW_TASK, params).rowcount == 1

    def release_task(
        self, task_id: str, fence: int, now: datetime, *, patient: bool = True
    ) -> bool:
        params = (self._ts(now), task_id, fence)
        with self._writing():
            return self._exec(sql.RELEASE, params, patient=patient).rowcount == 1

    # -- waiting and signals --------------------------------------------------------------
    def suspend_task(
        self, task_id: str, fence: int, signal: str, wake_at: datetime | None, now: datetime
    ) -> bool:
        wake = None if wake_at is None else self._ts(wake_at)
        params = (wake, self._ts(now), task_id, fence, task_id, signal)
        with self._writing():
            return self._exec(sql.SUSPEND, params).rowcount == 1

    def send_signal(self, task_id: str, name: str, payload: str, codec: str, now: datetime) -> bool:
        stamp = self._ts(now)

        def send(tx: Tx) -> bool:
            sent = tx.exec(sql.INSERT_SIGNAL, (task_id, name, payload, codec, stamp)).rowcount
            woken = tx.exec(sql.WAKE, (stamp, task_id)).rowcount
            if woken and self.announce_work:
                tx.exec(self.announce_work)
            return sent == 1

        with self._writing():
            return self._atomically(send)

    def get_signal(self, task_id: str, name: str) -> SignalRecord | None:
        rows = self._exec(sql.GET_SIGNAL, (task_id, name)).rows
        if not rows:
            return None
        payload, codec, sent_at = rows[0]
        return SignalRecord(task_id, name, payload, codec, sql.time_of(sent_at))

    # -- the fenced write path -----------------------------------------------------------
    def load_history(self, task_id: str) -> dict[int, StepRecord]:
        history = {
            seq: StepRecord(
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
                sql.time_of(claimed),
                sql.time_of(completed),
            )
            for seq, key, result, calls, claimed, completed in self._exec(
                sql.LOAD_OP_HISTORY, (task_id,)
            ).rows
        }
        # A history row at the same position (an operation adopted from another
        # task, or written by an older cairn) is the task's own record: it wins.
        history.update(
            (row[1], sql.step_record(row)) for row in self._exec(sql.LOAD_HISTORY, (task_id,)).rows
        )
        return history

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
            step.task_id,
            fence,
        )

    def record_step(self, step: StepRecord, fence: int, *, first: bool = False) -> bool:
        params = self._step_params(step, fence)
        with self._writing():
            if first:
                try:
                    return self._exec(sql.INSERT_STEP, params).rowcount == 1
                except DuplicateRow:
                    pass  # the position was written after all: fall back to the upsert
            return self._exec(sql.UPSERT_STEP, params).rowcount == 1

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
        params = (status, result, error, stamp, stamp, task_id, fence)
        with self._writing():
            return self._exec(sql.FINISH, params).rowcount == 1

    # -- reading and operator actions --------------------------------------------------
    def get_task(self, task_id: str) -> TaskRecord | None:
        rows = self._exec(sql.GET_TASK, (task_id,)).rows
        return sql.task_record(rows[0]) if rows else None

    def list_tasks(
        self, *, batch: str | None = None, status: str | None = None, limit: int | None = None
    ) -> Iterator[TaskRecord]:
        where = ["pos > ?"]
        params: list[Any] = []
        if batch is not None:
            where.append("batch = ?")
            params.append(batch)
        if status is not None:
            where.append("status = ?")
            params.append(status)
        statement = (
            f"SELECT pos, {sql.TASK_COLUMNS} FROM tasks WHERE {' AND '.join(where)} "
            "ORDER BY pos LIMIT ?"
        )
        # Keyset pages: never a whole table in memory, and no cursor held open
        # between pages, so a caller may write while iterating.
        after, left = 0, limit
        while left is None or left > 0:
            size = PAGE if left is None else min(PAGE, left)
            rows = self._exec(statement, (after, *params, size)).rows
            for row in rows:
                yield sql.task_record(row[1:])
            if len(rows) < size:
                return
            after = rows[-1][0]
            left = None if left is None else left - len(rows)

    def batch_summaries(self, name: str | None = None) -> list[BatchSummary]:
        where, params = ("", ()) if name is None else (" WHERE b.name = ?", (name,))
        summaries: dict[str, BatchSummary] = {}
        for row in self._exec(sql.BATCH_SUMMARIES.format(where=where), params).rows:
            known = summaries.get(row[0])
            if known is None:
                known = BatchSummary(row[0], row[1], sql.time_of(row[2]), {}, None, None)
            started = [t for t in (known.first_started_at, sql.opt_time(row[5])) if t]
            finished = [t for t in (known.last_finished_at, sql.opt_time(row[6])) if t]
            counts = dict(known.counts)
            if row[3] is not None:
                counts[row[3]] = row[4]
            summaries[row[0]] = BatchSummary(
                known.name,
                known.task_name,
                known.created_at,
                counts,
                min(started, default=None),
                max(finished, default=None),
            )
        return list(summaries.values())

    def batch_task_name(self, batch: str) -> str | None:
        rows = self._exec(sql.BATCH_TASK_NAME, (batch,)).rows
        return str(rows[0][0]) if rows else None

    def batch_counts(self, batch: str) -> Mapping[str, int]:
        return {str(status): int(n) for status, n in self._exec(sql.BATCH_COUNTS, (batch,)).rows}

    def cancel_task(self, task_id: str, now: datetime) -> bool:
        stamp = self._ts(now)
        with self._writing():
            return self._exec(sql.CANCEL, (stamp, stamp, task_id)).rowcount == 1

    def retry_task(self, task_id: str, now: datetime) -> bool:
        with self._writing():
            return self._exec(sql.RETRY, (self._ts(now), task_id)).rowcount == 1

    # -- operations ----------------------------------------------------------------------
    def claim_operation(
        self, scope: str, key: str, task_id: str, seq: int, fence: int, now: datetime
    ) -> OperationClaim:
        stamp = self._ts(now)
        params = (scope, key, task_id, seq, fence, stamp, stamp, stamp, task_id, fence)
        with self._writing():
            if self._exec(sql.CLAIM_OP, params).rowcount == 1:
                return OperationClaim(claimed=True, record=None)
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
        with self._writing():
            if self._exec(sql.RECLAIM_OP, params).rowcount == 1:
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
            error,
            int(permanent),
            completed_at,
            stamp,
            scope,
            key,
            calls,
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

    def resolve_operation(
        self,
        scope: str,
        key: str,
        status: str,
        *,
        result: str | None,
        permanent: bool,
        now: datetime,
    ) -> bool:
        stamp = self._ts(now)
        completed_at = stamp if status == "completed" else None
        # A key settled as failed says so in the audit, instead of keeping the
        # error that left it in doubt.
        error = (
            '{"type": "resolved", "message": "settled as failed by an operator"}'
            if status == "failed"
            else None
        )
        params = (status, result, int(permanent), completed_at, stamp, error, scope, key)
        with self._writing():
            return self._exec(sql.RESOLVE_OP, params).rowcount == 1

    def get_operation(self, scope: str, key: str) -> OperationRecord | None:
        rows = self._exec(sql.GET_OP, (scope, key)).rows
        return sql.op_record(rows[0]) if rows else None

    def list_operations(
        self,
        *,
        prefix: str | None = None,
        since: datetime | None = None,
        task_id: str | None = None,
        statuses: tuple[str, ...] | None = None,
        limit: int | None = None,
    ) -> Iterator[OperationRecord]:
        where: list[str] = []
        params: list[Any] = []
        if prefix:
            # substr, not LIKE: keys may hold % or _.
            where.append("substr(key, 1, ?) = ?")
            params += [len(prefix), prefix]
        if since is not None:
            where.append("first_claimed_at >= ?")
            params.append(self._ts(since))
        if task_id is not None:
            where.append("task_id = ?")
            params.append(task_id)
        if statuses:
            where.append("(" + " OR ".join("status = ?" for _ in statuses) + ")")
            params += list(statuses)
        yield from self._operation_pages(where, params, limit)

    def _operation_pages(
        self, where: list[str], params: list[Any], limit: int | None
    ) -> Iterator[OperationRecord]:
        order = "first_claimed_at, scope, key"
        after: tuple[Any, ...] | None = None
        left = limit
        while left is None or left > 0:
            size = PAGE if left is None else min(PAGE, left)
            clauses = list(where)
            page_params = list(params)
            if after is not None:
                clauses.append("(first_claimed_at, scope, key) > (?, ?, ?)")
                page_params += list(after)
            statement = f"SELECT {sql.OP_COLUMNS} FROM operations"
            if clauses:
                statement += " WHERE " + " AND ".join(clauses)
            statement += f" ORDER BY {order} LIMIT ?"
            rows = self._exec(statement, (*page_params, size)).rows
            for row in rows:
                yield sql.op_record(row)
            if len(rows) < size:
                return
            last = rows[-1]
            after = (last[10], last[0], last[1])
            left = None if left is None else left - len(rows)

    def operation_call_counts(self) -> tuple[int, int]:
        row = self._exec(sql.OP_CALL_COUNTS).rows[0]
        return int(row[0]), int(row[1])

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
    ) -> PermitRefused | None:
        spent_before = self._ts(now - window)
        lock = sql.LOCK_LIMIT.format(lock=self.row_lock_clause)

        def take(tx: Tx) -> PermitRefused | None:
            tx.exec(sql.ENSURE_LIMIT, (limit,))
            tx.exec(lock, (limit,))
            if tx.exec(sql.HAS_PERMIT, (limit, permit)).rows:
                return None  # a retried transaction whose first try committed
            tx.exec(sql.DROP_SPENT_PERMITS, (limit, spent_before))
            counted, held, first_ended = tx.exec(sql.COUNT_PERMITS, (limit,)).rows[0]
            if counted < capacity:
                params = (limit, permit, owner, task_id, self._ts(now), self._ts(lease_until))
                tx.exec(sql.INSERT_PERMIT, params)
                return None
            frees_at = None if first_ended is None else sql.time_of(first_ended) + window
            return PermitRefused(int(held), frees_at)

        with self._writing():
            return self._atomically(take)

    def release_permit(self, limit: str, permit: str, now: datetime) -> None:
        with self._writing():
            self._exec(sql.RELEASE_PERMIT, (self._ts(now), limit, permit))

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
        return (
            conv_id,
            message.idx,
            message.role,
            sql.pack_content(message.content),
            message.tokens,
            message.kind,
            message.covers_until,
            message.meta,
            sql.micros_of(message.created_at),
            message.task_id,
            fence,
        )

    def append_message(self, conv_id: int, message: MessageRecord, fence: int) -> bool:
        params = self._message_params(conv_id, message, fence)
        with self._writing():
            try:
                return self._exec(sql.INSERT_MESSAGE, params).rowcount == 1
            except DuplicateRow:
                # Only a retried write (its first try committed, then the
                # connection dropped) finds its own row here.
                found = self.load_messages(message.task_id, message.conv, message.idx, 1)
                if found and found[0].idx == message.idx and found[0].content == message.content:
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

    def load_active_messages(self, task_id: str, conv: str) -> list[MessageRecord]:
        params = (task_id, conv) * 3
        rows = self._exec(sql.LOAD_ACTIVE_MESSAGES, params).rows
        return [sql.message_record(task_id, conv, r) for r in rows]

    def load_messages(self, task_id: str, conv: str, start: int, limit: int) -> list[MessageRecord]:
        rows = self._exec(sql.LOAD_MESSAGES, (task_id, conv, start, limit)).rows
        return [sql.message_record(task_id, conv, r) for r in rows]

    def conversation_summaries(self, task_id: str) -> list[ConversationSummary]:
        rows = self._exec(sql.CONVERSATION_SUMMARIES, (task_id,)).rows
        return [
            ConversationSummary(task_id, r[0], int(r[1]), int(r[2]), int(r[3]), int(r[4]))
            for r in rows
        ]

    def recorded_calls(
        self, *, batch: str | None = None, task_id: str | None = None
    ) -> Iterator[RecordedCall]:
        params: tuple[str, ...]
        if task_id is not None:
            where, params = "t.id = ?", (task_id,)
        elif batch is not None:
            where, params = "t.batch = ?", (batch,)
        else:
            where, params = "1 = 1", ()
        for r in self._exec(sql.RECORDED_CALLS.format(filter=where), params).rows:
            yield RecordedCall(r[0], r[1], r[2], r[3], r[4], r[5], r[6])

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

    def list_schedules(self) -> list[ScheduleRecord]:
        return [sql.schedule_record(row) for row in self._exec(sql.LIST_SCHEDULES).rows]

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

        with self._writing():
            return self._atomically(advance)


class _FencedOut(Exception):
    """Raised inside a transaction to roll it back when the fence moved."""
