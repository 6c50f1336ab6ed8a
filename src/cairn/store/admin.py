"""The admin side of the store contract: what listings, the dashboard, operator
actions, metrics and reports, export and import, prune and gc ask of a store.

``AdminStore`` is the engine's ``Store`` plus these methods; cairn's SQLite and
PostgreSQL stores implement both (``cairn.store.sqladmin``,
``cairn.store.sqltransfer``). A caller holding a ``Store`` (``Cairn.store``, which
may be a store of the user's own) gets its admin side with ``admin(store)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from cairn.errors import ConfigurationError
from cairn.store.protocol import Store
from cairn.store.records import (
    AuditRecord,
    BatchSummary,
    ConversationSummary,
    OperationRecord,
    RecordedCall,
    ScheduleRecord,
    StepRecord,
    TaskRecord,
    TaskRunRecord,
)
from cairn.store.reports import (
    BatchSpan,
    OpTotals,
    RunningTask,
    StatusCount,
    StepInFlight,
    StepTotals,
    TaskQuery,
    TaskTotals,
    Window,
)

__all__ = ["AdminStore", "admin"]


@runtime_checkable
class AdminStore(Store, Protocol):
    """A store with its admin side: listings, reports, moving and maintenance."""

    # The schema version this cairn writes, and the one the store held when this
    # object opened it: 0 if opening created it, lower if opening upgraded it.
    schema_version: int
    found_schema: int

    # -- listings, views and operator actions ----------------------------------------
    def list_tasks(
        self,
        *,
        batch: str | None = None,
        status: str | None = None,
        limit: int | None = None,
        query: TaskQuery | None = None,
    ) -> Iterator[TaskRecord]:
        """Tasks in enqueue order, streamed a page at a time: those ``query``
        picks, or (without one) of ``batch`` and ``status``, cairn's own included."""
        ...

    def workers_seen(self, since: datetime) -> list[tuple[str, str]]:
        """Each worker (owner, versions as JSON) whose row was written at or after
        ``since``: the workers alive now, for ``cairn versions``."""
        ...

    def running_tasks(self, batch: str | None) -> list[TaskRecord]:
        """Tasks in status running, of one batch or (None) of every batch."""
        ...

    def batch_summaries(self, name: str | None = None) -> list[BatchSummary]:
        """Every batch (or one) with its task counts."""
        ...

    def find_tasks(
        self, query: TaskQuery, *, below: int | None = None, above: int | None = None, size: int
    ) -> list[tuple[int, TaskRecord]]:
        """Up to ``size`` tasks that ``query`` picks, each with its position,
        newest first: the newest below position ``below`` (or of all), or, given
        only ``above``, the oldest above it. Keyset reads: no OFFSET."""
        ...

    def count_tasks(self, query: TaskQuery, *, up_to: int | None = None) -> int:
        """How many tasks ``query`` picks (counting no further than ``up_to``)."""
        ...

    def child_ids(self, task_id: str) -> list[str]:
        """The ids of the tasks ``task_id`` spawned, in the order they were made."""
        ...

    def batch_page(
        self,
        *,
        search: str | None = None,
        below: tuple[datetime, str] | None = None,
        above: tuple[datetime, str] | None = None,
        size: int,
    ) -> list[BatchSummary]:
        """Up to ``size`` batches whose name holds ``search``, newest first by
        (created_at, name): those before ``below``, or, given only ``above``,
        the oldest after it."""
        ...

    def count_batches(self, search: str | None = None) -> int:
        """How many batches' names hold ``search`` (all, if None)."""
        ...

    def cancel_task(self, task_id: str, now: datetime) -> bool:
        """Cancel a pending or running task (a running owner sees it at its next write)."""
        ...

    def retry_task(self, task_id: str, now: datetime) -> bool:
        """Move a failed (or cancelled) task back to pending with a fresh budget."""
        ...

    def set_priority(self, task_id: str, priority: int, now: datetime) -> bool:
        """Give a pending or waiting task ``priority``; False if it is not one."""
        ...

    def set_batch_priority(self, batch: str, priority: int, now: datetime) -> int:
        """``set_priority`` for every pending or waiting task of ``batch``; how many."""
        ...

    def cancel_batch(self, batch: str, status: str, now: datetime) -> list[str]:
        """Cancel every task of ``batch`` that is ``status`` (pending, running or
        waiting) at once; the ids cancelled, in enqueue order."""
        ...

    def retry_batch(self, batch: str, status: str, now: datetime) -> list[str]:
        """``retry_task`` for every task of ``batch`` that is ``status`` (failed or
        cancelled) at once; the ids moved back to pending, in enqueue order."""
        ...

    def cancel_family(self, task_id: str, now: datetime) -> list[str]:
        """Cancel a pending, running or waiting task and, in the same transaction,
        every unfinished task below it (its spawned children, theirs, ...), one
        generation at a time; the ids cancelled, the task first ([] if it could
        not be cancelled). A child made while this runs is either cancelled
        with the rest or never made (a child is made only under its parent's
        fence, which this moves); one claimed meanwhile is cancelled too (its
        fence moves, so its owner stops at its next write)."""
        ...

    # -- reruns from a step, and their lineage (docs/reruns.md) --------------------------
    def fork_task(self, task_id: str, run: int, from_seq: int, now: datetime, by: str) -> bool:
        """Start run ``run + 1`` of a finished task whose current run is ``run``,
        in one transaction: the run's outcome is kept (``task_runs``), its
        entries at ``from_seq`` and after move to ``superseded_entries``, and the
        task is pending again with a fresh retry budget, its fence moved. False
        (nothing written) if the task is not finished or is at another run."""
        ...

    def task_runs(self, task_id: str) -> list[TaskRunRecord]:
        """The runs of ``task_id`` a rerun superseded, oldest first."""
        ...

    def superseded_entries(self, task_id: str, since_run: int = 1) -> list[tuple[int, StepRecord]]:
        """(run, entry) of every entry a rerun took out of ``task_id``'s history,
        of run ``since_run`` and later, by run then position."""
        ...

    def forked_tasks(self, batch: str | None) -> list[TaskRecord]:
        """The tasks of ``batch`` (or of every batch) whose current run is a rerun's."""
        ...

    # -- the audit trail ------------------------------------------------------------------
    def begin_audit(
        self, at: datetime, actor: str, action: str, target: str, detail: str | None
    ) -> int:
        """Write an operator action about to be made (its count still unknown);
        its id, for ``end_audit``."""
        ...

    def end_audit(self, entry: int, count: int | None, outcome: str | None) -> None:
        """Complete audit entry ``entry`` with how many tasks the action changed."""
        ...

    def audit_page(self, before: int | None, size: int) -> list[AuditRecord]:
        """Up to ``size`` audit entries, newest first, older than entry ``before``."""
        ...

    def list_operations(
        self,
        *,
        prefix: str | None = None,
        since: datetime | None = None,
        task_id: str | None = None,
        statuses: tuple[str, ...] | None = None,
        limit: int | None = None,
    ) -> Iterator[OperationRecord]:
        """The audit log, oldest first, streamed."""
        ...

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
        """An operator settles a key that is not completed."""
        ...

    def operation_call_counts(self) -> tuple[int, int]:
        """(keys whose function ran more than once, all keys)."""
        ...

    def conversation_summaries(self, task_id: str) -> list[ConversationSummary]:
        """Every conversation of a task, with its row counts."""
        ...

    def recorded_calls(
        self, *, batch: str | None = None, task_id: str | None = None
    ) -> Iterator[RecordedCall]:
        """Completed history entries of kind ``llm`` or ``conv``, in task then seq order."""
        ...

    def list_schedules(self) -> list[ScheduleRecord]:
        """Every schedule's row, by name."""
        ...

    # -- reports (cairn.observe): tasks cairn runs for itself are never counted ------
    def task_totals(self, window: Window) -> TaskTotals:
        """Counts over the tasks of ``window``: by status, interruptions, retries."""
        ...

    def failed_task_errors(self, window: Window) -> Iterator[str | None]:
        """The recorded error (JSON text) of every failed task in the window."""
        ...

    def batch_spans(self, window: Window) -> list[BatchSpan]:
        """Each batch of the window's tasks: first start, last finish, unfinished."""
        ...

    def step_totals(self, window: Window) -> StepTotals:
        """Counts over the step rows (kind 'step') of the window's tasks."""
        ...

    def step_durations(self, window: Window) -> Iterator[tuple[str, datetime, datetime]]:
        """(name, started_at, finished_at) of every completed step in the window."""
        ...

    def task_summary(self, window: Window) -> tuple[TaskTotals, list[BatchSpan]]:
        """``task_totals`` and ``batch_spans`` of the window, read in one scan."""
        ...

    def finished_steps(
        self, window: Window, since: datetime | None
    ) -> Iterator[tuple[str, int, str, str, int, datetime, datetime]]:
        """(task_id, seq, kind, name, attempts, started_at, finished_at) of every
        completed ``step`` or ``llm`` row in the window finished at or after
        ``since`` (all of them when None)."""
        ...

    def suspect_reruns(self, window: Window) -> tuple[int, int]:
        """(completed steps of interrupted tasks with attempts > 1, their tasks),
        read through the interrupted tasks only."""
        ...

    def step_errors(self, window: Window) -> Iterator[str | None]:
        """The last recorded error of every failed or retrying step row in the window."""
        ...

    def op_totals(self, window: Window) -> OpTotals:
        """Operation keys first claimed in the window, and their calls."""
        ...

    def running_checkpoints(self) -> list[RunningTask]:
        """Every running task with the last moment it showed progress."""
        ...

    def error_groups(self, query: TaskQuery, limit: int) -> list[tuple[str, int]]:
        """The failed tasks ``query`` picks by their recorded error's type
        (``unknown``: none recorded), with their counts, most first, at most
        ``limit`` groups: counted by the store (a GROUP BY on how the error
        starts), not read task by task."""
        ...

    def failed_since(self, since: datetime, limit: int) -> list[TaskRecord]:
        """Up to ``limit`` tasks that failed for good at or after ``since``,
        oldest failure first; cairn's own tasks left out."""
        ...

    def metric_hours(self, since: datetime) -> list[tuple[datetime, int, int, float]]:
        """The hours summed so far from ``since`` on: (its start, tasks finished
        in it, of which failed, what the model calls finished in it cost),
        oldest first."""
        ...

    def calls_finished_between(
        self, start: datetime, end: datetime
    ) -> list[tuple[datetime, RecordedCall]]:
        """The model calls and compactions finished in ``[start, end)``, each with
        when it finished, read through the index of their finishes."""
        ...

    def finishes_between(self, start: datetime, end: datetime) -> list[tuple[datetime, str]]:
        """(finished_at, status) of each task finished in ``[start, end)``, read
        through the index on ``finished_at``; cairn's own tasks left out."""
        ...

    def save_metric_hours(self, hours: Sequence[tuple[datetime, int, int, float]]) -> None:
        """Keep these closed hours' sums (idempotent: a second writer writes the same)."""
        ...

    def failed_steps(self, task_ids: Sequence[str]) -> dict[str, str]:
        """The name of the last failed entry of each of ``task_ids`` that has
        one (the step a failed task failed in), by task id."""
        ...

    def task_log(self, task_id: str) -> tuple[list[dict[str, Any]], int] | None:
        """The log records ``task_id`` kept, and how many it did not keep; None
        if it kept none (``cairn logs``, the task page)."""
        ...

    def steps_in_flight(self, task_ids: Sequence[str]) -> dict[str, StepInFlight]:
        """The step in flight of each of ``task_ids`` that is running and has one
        noted (``RunningTask.in_flight``), by task id: one look per 500 ids."""
        ...

    def open_alerts(self, alert_task: str, raised: str, cleared: str) -> list[str]:
        """Ids (without the ``raised`` prefix) of tasks named ``alert_task`` that
        completed and have no ``cleared`` twin yet: stalls alerted and not yet
        recovered."""
        ...

    # -- moving a batch, pruning, blob references --------------------------------------
    def export_rows(
        self,
        batch: str,
        sink: Callable[[str, dict[str, Any]], None],
        *,
        again: Callable[[], None] | None = None,
    ) -> int:
        """Hand every row of ``batch`` to ``sink`` as (table, {column: value}),
        parents before children, values as a record holds them, read from one
        snapshot a page at a time (memory does not grow with the batch); return
        how many (0: no such batch). If the snapshot is lost part-way (a lost
        connection), call ``again``, which undoes what ``sink`` did, and read
        the batch again from a new one; without ``again``, raise
        ``StoreUnavailable``."""
        ...

    def import_rows(self, rows: Iterable[tuple[str, Mapping[str, Any]]]) -> None:
        """Insert rows as ``export_rows`` gives them, all in one transaction, read
        as they are inserted (``rows`` may be a stream, read again from the start
        if the transaction is tried again); a key the store assigns is given
        anew and the rows after it that refer to it follow."""
        ...

    def tasks_present(self, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` (up to 500 at once) that are ids of tasks in the
        store, in one look: an import's survey asks a page at a time."""
        ...

    def batch_names(self) -> list[str]:
        """Every batch's name, oldest first."""
        ...

    def batch_statuses(self, batch: str) -> list[StatusCount]:
        """The tasks of ``batch`` by status, each with the last one to finish."""
        ...

    def delete_batch(self, batch: str) -> None:
        """Delete every row of ``batch``, in one transaction."""
        ...

    def count_expired(self, batch: str, status: str, finished_before: datetime) -> int:
        """How many tasks of ``batch`` in ``status`` finished before ``finished_before``."""
        ...

    def expire_tasks(self, batch: str, status: str, finished_before: datetime, limit: int) -> int:
        """Delete up to ``limit`` such tasks with all their rows (and the batch's
        row once it has no task left), in one short transaction; how many went."""
        ...

    def meta_value(self, key: str) -> str | None:
        """The store's own note ``key``, if there is one."""
        ...

    def put_meta(self, key: str, value: str) -> None:
        """Write the store's own note ``key``."""
        ...

    def take_turn(self, key: str, due: str, then: str) -> bool:
        """Move note ``key`` to ``then`` if it is missing or at most ``due``;
        whether this caller did (and so has the turn)."""
        ...

    def blob_refs(self) -> Iterator[str]:
        """Every blob reference any record of the store holds."""
        ...


def admin(store: Store, what: str = "this") -> AdminStore:
    """``store`` with its admin side; ``ConfigurationError`` naming ``what`` needs
    it if ``store`` (a store of the user's own) has only the engine's."""
    if not isinstance(store, AdminStore):
        raise ConfigurationError(
            f"{what} needs a store with the admin side (cairn.store.AdminStore: listings, "
            f"metrics, export and maintenance), as cairn's SQLite and PostgreSQL stores "
            f"have; {type(store).__name__} has only the engine's side"
        )
    return store
