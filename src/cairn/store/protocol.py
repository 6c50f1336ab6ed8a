"""The engine's store contract, in storage terms: what claiming, steps,
operations, leases, permits, signals, children, conversations and schedules
ask of a store. Listings, reports, export and maintenance are the admin side
(``cairn.store.admin.AdminStore``), which cairn's own stores also implement.

The engine above this line knows tasks, steps and replay; a store below it knows
only rows: create, claim, record under a fence, finish, read. Every write that
belongs to a running task carries the task's fence, and a store returns False
from it (never raises) when the fence no longer matches, so the engine can tell
a lost lease from a cancellation and react.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from cairn.store.capabilities import Capabilities
from cairn.store.records import (
    ActiveRow,
    BudgetRecord,
    BudgetRefused,
    Gated,
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


class Store(Protocol):
    """A durable home for batches, tasks and task histories, as the engine uses it."""

    url: str
    # Where the data lives, the same for every URL that names it (a SQLite file's
    # resolved path; a PostgreSQL server, database and schema): what this process
    # keys its own running tasks by.
    identity: str

    @property
    def capabilities(self) -> Capabilities:
        """What this backend can do."""
        ...

    def close(self) -> None:
        """Release every connection this store opened."""
        ...

    def close_thread(self) -> None:
        """Release the calling thread's connection, if it has one of its own
        (called by worker threads as they end)."""
        ...

    def bound_round_trips(self, seconds: float) -> None:
        """Give up on a round trip to a server that stays silent ``seconds``
        while not working on it, and reconnect (the app passes a third of its
        lease; two apps on one store: the shorter wins). A no-op for a store
        with no connection to lose."""
        ...

    # -- creating work -------------------------------------------------------
    def ensure_batch(self, name: str, task_name: str, now: datetime) -> None:
        """Create the batch row if it does not exist."""
        ...

    def create_task(self, task: NewTask, now: datetime) -> bool:
        """Insert ``task`` unless its id exists. True if it was inserted."""
        ...

    def enqueue(self, tasks: Iterable[NewTask], now: datetime) -> int:
        """Insert many tasks, skipping ids that exist, and each task's batch row
        with its first tasks. Returns how many tasks were new."""
        ...

    def debounce(
        self, task: NewTask, key: str, window_ms: int, due: datetime, now: datetime
    ) -> Gated:
        """One event of debounce ``key``: insert ``task`` waiting until ``due``,
        or, if the key has a task that has not started, give that one
        ``task``'s arguments, ``due`` and one more event (docs/debounce.md)."""
        ...

    def enqueue_singleton(self, task: NewTask, key: str, queue: bool, now: datetime) -> Gated:
        """Insert ``task`` as the holder of singleton ``key``; if another task
        holds it, queue ``task`` behind it (``queue``) or drop it and answer
        with the holder's id."""
        ...

    # -- ownership -------------------------------------------------------------
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
        """Atomically take the oldest pending task of ``batch`` (or, with None, of
        any batch whose task is one of ``names``), or None. With ``versions``,
        only a task of one of them (or of no version). A task taken for the
        first time records ``version``, the claimer's (None: left as it is).

        A fair claim (``batch`` None, ``after_batch`` given: the batch this
        process claimed from last, "" at a round's start) takes, at the highest
        pending priority, the first task of the first batch named after
        ``after_batch``; only when there is none, the oldest task (docs/workers.md)."""
        ...

    def wait_for_work(self, timeout: float) -> bool:
        """Block until new tasks may have been enqueued (True), or ``timeout``
        passes (False)."""
        ...

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
        """Take ``task_id`` if its fence still equals ``expected_fence``
        (compare-and-set) and it is pending, or waiting with its wake-up time
        passed, or running and either ``owner_gone`` (the caller knows its owner
        no longer runs) or its lease expired before ``lapsed_before``. The lease
        is checked in the same statement, so a renewal that lands first wins.
        A task taken for the first time records ``version``, the claimer's app
        version (None: left as it is). None if the task was not taken."""
        ...

    def expired_running(
        self,
        batch: str | None,
        names: Sequence[str] | None,
        lapsed_before: datetime,
        limit: int,
        *,
        versions: Sequence[str] | None = None,
    ) -> list[TaskRecord]:
        """Up to ``limit`` running tasks (of ``batch``, or of any batch whose task is
        one of ``names``, or of any) whose lease expired before ``lapsed_before``,
        oldest expiry first, found through an index of running rows only."""
        ...

    def running_owners(
        self,
        batch: str | None,
        names: Sequence[str] | None,
        *,
        versions: Sequence[str] | None = None,
    ) -> list[str]:
        """The distinct owners of running tasks (one per process holding some)."""
        ...

    def has_pending(
        self,
        batch: str | None,
        names: Sequence[str] | None,
        *,
        versions: Sequence[str] | None = None,
    ) -> bool:
        """Whether any task of these is pending: after a claim found none, one
        that another claimer holds in a transaction not yet committed."""
        ...

    def owned_running(
        self,
        owner: str,
        batch: str | None,
        names: Sequence[str] | None,
        limit: int,
        *,
        versions: Sequence[str] | None = None,
    ) -> list[TaskRecord]:
        """Up to ``limit`` running tasks held by ``owner``, in enqueue order."""
        ...

    def renew_leases(
        self, owner: str, lease_until: datetime, *, patient: bool = True
    ) -> list[tuple[str, int]]:
        """Push the lease of every running task ``owner`` holds, and of the shared-limit
        permits its running calls hold. Returns (task id, fence) of each task
        renewed. ``patient=False``: give up at once (``StoreUnavailable``) if the
        store cannot be reached, for a caller that retries with a fresh lease."""
        ...

    def renew_task(self, task_id: str, fence: int, lease_until: datetime) -> bool:
        """Push one running task's lease if its fence still equals ``fence``."""
        ...

    def task_log(self, task_id: str) -> tuple[list[dict[str, Any]], int] | None:
        """The log records ``task_id`` kept (``cairn.engine.tasklogs``), and how
        many it did not keep; None if it kept none."""
        ...

    def save_task_log(self, task_id: str, lines: Sequence[dict[str, Any]], dropped: int) -> None:
        """Replace ``task_id``'s kept log records and the count of those not kept."""
        ...

    def note_in_flight(self, notes: Sequence[InFlightNote]) -> None:
        """Note, for each running task still at its fence, the entry its owner
        is running now (the heartbeat's note; no checkpoint: ``updated_at`` is
        left as it is). Gives up at once (``StoreUnavailable``) if the store
        cannot be reached: the next beat notes it again."""
        ...

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
        """Take permit ``permit`` of shared limit ``limit`` if fewer than ``capacity``
        permits count against it now (and, with ``amount_capacity``, the amounts
        they hold leave room for ``amount``), atomically across every process on
        the store, unless the limit is closed (``close_limit``) until later.

        A permit counts while its call runs (until ``lease_until``, pushed on by
        ``renew_leases`` while ``task_id`` runs under ``owner``), then for
        ``window`` after ``release_permit`` or ``settle_permit``. None when
        granted (also when this very permit was granted already); otherwise why not.

        A keyed limit's permits (``limit`` is ``"name<US>key"``) are counted per
        key under the lock of one row, ``lock_row`` (the declared name); with
        ``sweep`` (a prefix, ``"name<US>"``), the spent permits of every key of
        it are dropped too, so that keys no longer used leave no rows."""
        ...

    def release_permit(
        self, limit: str, permit: str, now: datetime, *, forget: bool = False
    ) -> None:
        """The call holding ``permit`` ended at ``now``, whatever its outcome.
        ``forget``: the permit counts no longer at all (a concurrency limit's),
        so its row is deleted."""
        ...

    def settle_permit(self, limit: str, permit: str, amount: int, now: datetime) -> None:
        """The call holding ``permit`` ended at ``now``; it holds ``amount`` from now
        on (what the provider reported it used, in place of what was reserved)."""
        ...

    def close_limit(self, limit: str, until: datetime) -> None:
        """Lend no permit of ``limit`` before ``until`` (a later close wins)."""
        ...

    # -- budgets (cairn.budgets) --------------------------------------------------
    def declare_budget(
        self, scope: str, usd_nanos: int | None, tokens: int | None, warn_at: float, now: datetime
    ) -> None:
        """Make budget ``scope`` with these caps, unless it exists (a raise stands)."""
        ...

    def reserve_budget(
        self,
        scopes: Sequence[str],
        permit: str,
        owner: str,
        task_id: str,
        usd_nanos: int,
        tokens: int,
        now: datetime,
        lease_until: datetime,
    ) -> BudgetRefused | tuple[str, ...]:
        """Reserve ``usd_nanos`` and ``tokens`` under permit ``permit`` against
        every budget of ``scopes`` that exists, all or none, atomically across
        every process on the store. The scopes charged, or the first refusal."""
        ...

    def settle_budget(
        self, scopes: Sequence[str], permit: str, usd_nanos: int, tokens: int
    ) -> None:
        """The call holding ``permit`` ended: its reservation on each of ``scopes``
        becomes spend of ``usd_nanos`` and ``tokens`` (what it really used)."""
        ...

    def park_task(
        self, task_id: str, fence: int, scope: str, raised: int, needed: str, now: datetime
    ) -> bool:
        """Move a running task to waiting on budget ``scope`` if the fence holds
        and the budget was raised ``raised`` times (no raise since it refused)."""
        ...

    def raise_budget(
        self, scope: str, usd_nanos: int | None, tokens: int | None, now: datetime
    ) -> list[str] | None:
        """Set budget ``scope``'s caps (None: leave that one), re-arm its alerts
        and wake the tasks parked on it: their ids; None if there is no such budget."""
        ...

    def get_budget(self, scope: str) -> BudgetRecord | None:
        """Budget ``scope`` with its spend and parked tasks, or None."""
        ...

    def budgets_like(self, prefix: str) -> list[BudgetRecord]:
        """Every budget whose scope starts with ``prefix``."""
        ...

    def budget_park(self, task_id: str) -> str | None:
        """The budget the waiting task ``task_id`` is parked on, or None."""
        ...

    def mark_budget_alert(self, scope: str, which: str, now: datetime) -> bool:
        """Note that alert ``which`` ('warned' or 'reached') of budget ``scope``
        fired; True for the one caller that noted it first."""
        ...

    def release_task(
        self, task_id: str, fence: int, now: datetime, *, patient: bool = True
    ) -> bool:
        """Hand a running task back as pending (clean shutdown, or after the store
        failed under it). The fence moves, so the process that held it can write
        nothing more. ``patient=False``: one try, for a caller already failing."""
        ...

    # -- waiting and signals ------------------------------------------------------
    def suspend_task(
        self, task_id: str, fence: int, signal: str, wake_at: datetime | None, now: datetime
    ) -> bool:
        """Move a running task to waiting (until ``wake_at``, or a signal) if the
        fence holds and no signal ``signal`` has arrived for it yet. False if
        either check failed; the caller looks which."""
        ...

    def send_signal(self, task_id: str, name: str, payload: str, codec: str, now: datetime) -> bool:
        """Record signal ``name`` for the task (False if one was sent already) and
        wake the task if it is waiting, in one transaction."""
        ...

    def get_signal(self, task_id: str, name: str) -> SignalRecord | None:
        """The signal ``name`` sent to the task, or None."""
        ...

    # -- the fenced write path -----------------------------------------------
    def load_history(self, task_id: str) -> dict[int, StepRecord]:
        """The whole recorded history of a task, in one read, keyed by seq."""
        ...

    def record_step(self, step: StepRecord, fence: int, *, first: bool = False) -> bool:
        """Insert or update the history entry at (task, seq) if the fence holds.

        ``first`` says the caller knows nothing is recorded at that position yet,
        so a store may use a cheaper plain insert."""
        ...

    def note_worker(self, owner: str, versions: str, now: datetime) -> None:
        """Record that worker ``owner`` is alive now and claims ``versions`` (a
        JSON list; ``["*"]`` for any): written at its start and heartbeat."""
        ...

    def forget_worker(self, owner: str) -> None:
        """Remove worker ``owner``'s row (it stopped)."""
        ...

    def rerun_steps(
        self, task_id: str, from_seq: int, fence: int, also: Sequence[int] = ()
    ) -> bool:
        """Mark the task's completed ``step`` entries at ``from_seq`` and after,
        and its completed entries at the positions ``also``, as to be run again
        (``retrying``, no attempt spent in this task attempt), if the fence
        holds; other entries are left as they are."""
        ...

    def start_attempt(
        self, task_id: str, fence: int, attempts: int, error: str | None, now: datetime
    ) -> bool:
        """Record that task attempt number ``attempts`` begins; ``error`` is the
        previous attempt's, when this one is a retry."""
        ...

    def finish_task(
        self,
        task_id: str,
        fence: int,
        status: str,
        result: str | None,
        error: str | None,
        now: datetime,
    ) -> bool:
        """Move a running task to a final status if the fence holds."""
        ...

    # -- reading -----------------------------------------------------------------
    def get_task(self, task_id: str) -> TaskRecord | None:
        """One task, or None."""
        ...

    def batch_task_name(self, batch: str) -> str | None:
        """The task function a batch runs, or None if there is no such batch."""
        ...

    def batch_counts(self, batch: str) -> Mapping[str, int]:
        """Task counts by status for one batch."""
        ...

    # -- operations (side effects guarded by keys) -----------------------------------
    def claim_operation(
        self, scope: str, key: str, task_id: str, seq: int, fence: int, now: datetime
    ) -> OperationClaim:
        """Insert ``key`` as claimed (calls = 1) if it is new and the fence holds."""
        ...

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
        """Claim a key that is not completed again (calls + 1), if ``calls`` still
        equals ``expected_calls`` and the caller's fence holds (compare-and-set).
        A key still ``claimed`` is taken only if ``claimant_gone`` (the caller
        knows the claimant cannot record), or if the claimant's task no longer
        runs under the claim's fence with a lease valid at ``lapsed_before``
        (default ``now``): checked in the same statement, so a claimant that
        renewed meanwhile keeps its claim."""
        ...

    def complete_operation(
        self, scope: str, key: str, calls: int, result: str, step: StepRecord, fence: int
    ) -> bool:
        """Mark claim ``calls`` completed with ``result``, if the claiming task
        ``step.task_id`` still runs under ``fence``. The completed operation is
        also that task's history entry at ``step.seq`` (``load_history`` returns
        it). False, with nothing written, if the fence moved or the claim did."""
        ...

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
        """Mark claim ``calls`` failed, in doubt, or completed (from a reconcile),
        if the settling task ``task_id`` still runs under ``fence``."""
        ...

    def record_late_result(self, scope: str, key: str, result: str, now: datetime) -> bool:
        """Keep, for the audit only, an outcome a claimant learned after it lost its
        task: nothing else about the key changes."""
        ...

    def get_operation(self, scope: str, key: str) -> OperationRecord | None:
        """One operation, or None."""
        ...

    # -- conversations (cairn.agent) -------------------------------------------------
    def open_conversation(self, task_id: str, name: str, fence: int) -> int | None:
        """The integer key of conversation ``name`` of the task, created (under the
        fence) if it has none yet; None if the fence moved. Safe against a rival
        opener: both get the same key."""
        ...

    def append_message(self, conv_id: int, message: MessageRecord, fence: int) -> bool:
        """Insert one row of conversation ``conv_id`` if the fence holds (one
        statement, one commit)."""
        ...

    def append_messages(self, conv_id: int, messages: Sequence[MessageRecord], fence: int) -> bool:
        """Insert several rows in one transaction, all or none, if the fence holds."""
        ...

    def load_active_messages(self, task_id: str, conv: str) -> list[MessageRecord]:
        """Row 0 and every row after the latest summary's ``covers_until``, by idx:
        the rows of the active context, read in time proportional to their number."""
        ...

    def load_active_rows(self, task_id: str, conv: str) -> list[ActiveRow]:
        """The rows ``load_active_messages`` reads, each message parsed: what a
        resumed conversation needs, in one pass over the rows."""
        ...

    def load_messages(self, task_id: str, conv: str, start: int, limit: int) -> list[MessageRecord]:
        """Up to ``limit`` rows from position ``start`` on, by idx (archive and replay)."""
        ...

    # -- schedules (cairn.schedule) ------------------------------------------------------
    def add_schedule(self, schedule: ScheduleRecord) -> bool:
        """Insert the row of a schedule seen for the first time, unless it exists.
        True if it was inserted."""
        ...

    def get_schedule(self, name: str) -> ScheduleRecord | None:
        """One schedule's row, or None."""
        ...

    def advance_schedule(
        self,
        expected_covered_until: datetime,
        schedule: ScheduleRecord,
        firings: Sequence[NewTask],
        now: datetime,
    ) -> bool:
        """In one transaction: overwrite the row of ``schedule.name`` with
        ``schedule``'s spec, ``covered_until`` and (when not None)
        ``last_fired_at``, if its ``covered_until`` still equals
        ``expected_covered_until`` (compare-and-set), and then insert the tasks
        ``firings`` (skipping ids that exist). False, with nothing written, if
        another writer moved the row first."""
        ...
