"""A task's runs and what a rerun changed.

``lineage`` lists the runs of a task, oldest first: how each superseded run
ended and where the next one forked from it (position, entry, when, by whom).
``run_history`` gives any run's history as that run recorded it: the entries
before each fork are shared by the runs on either side, and each superseded
run's own entries from its fork point on are kept apart (``AdminStore
.superseded_entries``). ``task_diff`` compares the current run with the one it
forked from, entry by entry from the fork point (matched by kind and name, in
order; a key of ``ctx.run_key`` by its parts, not its run), and their
outcomes; ``batch_diff`` does so for every rerun task of a batch, with the
totals: tasks whose result changed, the cost of the rerun.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from cairn.admin.reruns import calls_cost
from cairn.admin.views import ErrorView, ValueView, error_view, value_view
from cairn.agent.costs import CostLine
from cairn.keys import RUN_MARK
from cairn.store import AdminStore
from cairn.store.records import FINISHED_STATUSES, StepRecord, TaskRecord, TaskRunRecord

__all__ = [
    "BatchDiff",
    "EntryChange",
    "RunView",
    "TaskDiff",
    "batch_diff",
    "lineage",
    "run_history",
    "task_diff",
]


@dataclass(frozen=True, slots=True)
class RunView:
    """One run of a task. For a superseded run: how it ended, and where the
    next run forked from it (``fork_seq``, the entry there, when, by whom);
    for the current run (``current``), those are None."""

    run: int
    current: bool
    status: str
    result: ValueView | None
    error: ErrorView | None
    attempts: int
    started_at: datetime | None
    finished_at: datetime | None
    fork_seq: int | None = None
    fork_name: str | None = None
    forked_at: datetime | None = None
    forked_by: str | None = None


def _superseded_view(task: TaskRecord, row: TaskRunRecord, name: str | None) -> RunView:
    return RunView(
        row.run, False, row.status, value_view(row.result, task.codec), error_view(row.error),
        row.attempts, row.started_at, row.finished_at, row.fork_seq, name, row.forked_at,
        row.forked_by,
    )  # fmt: skip


def lineage(store: AdminStore, task: TaskRecord) -> list[RunView]:
    """Every run of ``task``, oldest first; a task never rerun has one."""
    runs = store.task_runs(task.id)
    names = {(run, entry.seq): entry.name for run, entry in store.superseded_entries(task.id)}
    views = [_superseded_view(task, row, names.get((row.run, row.fork_seq))) for row in runs]
    current = RunView(
        task.run, True, task.status, value_view(task.result, task.codec), error_view(task.error),
        task.attempts - task.retry_base, task.started_at, task.finished_at,
    )  # fmt: skip
    return [*views, current]


def run_history(store: AdminStore, task: TaskRecord, run: int) -> dict[int, StepRecord]:
    """Run ``run``'s history as it recorded it (the current run's is the task's)."""
    if not 1 <= run <= task.run:
        raise ValueError(f"task {task.id} has runs 1 to {task.run}; no run {run}")
    view = store.load_history(task.id)
    if run == task.run:
        return view
    forks = {row.run: row.fork_seq for row in store.task_runs(task.id)}
    kept: dict[int, dict[int, StepRecord]] = defaultdict(dict)
    for owner, entry in store.superseded_entries(task.id, since_run=run):
        kept[owner][entry.seq] = entry
    # Walk back from the current run: run r shares the entries before its
    # fork point with run r + 1, and has its own from there on.
    for earlier in range(task.run - 1, run - 1, -1):
        fork = forks[earlier]
        view = {seq: e for seq, e in view.items() if seq < fork} | kept[earlier]
    return dict(sorted(view.items()))


Change = Literal["changed", "added", "removed"]


@dataclass(frozen=True, slots=True)
class EntryChange:
    """One entry from the fork point on that differs between the runs: its
    output (or status) changed, or only one run has it."""

    kind: str
    name: str
    change: Change
    before_seq: int | None
    after_seq: int | None
    before: ValueView | None
    after: ValueView | None
    before_status: str | None
    after_status: str | None


@dataclass(frozen=True, slots=True)
class TaskDiff:
    """What task ``task``'s current run changed against the run it forked
    from: the entries that differ (``unchanged`` others), its outcome, what
    the new run's model calls from the fork point cost, and the operations the
    new run found done instead of calling (``kept_operations``)."""

    task: TaskRecord
    forked_from: int
    fork_seq: int
    fork_name: str
    changes: list[EntryChange]
    unchanged: int
    status_before: str
    result_before: ValueView | None
    result_after: ValueView | None
    cost: CostLine
    kept_operations: list[str] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.task.status in FINISHED_STATUSES

    @property
    def result_changed(self) -> bool:
        """Whether the new run ended otherwise than the old (only once it ended)."""
        if not self.finished:
            return False
        if self.task.status != self.status_before:
            return True
        return self.result_after != self.result_before

    @property
    def changed(self) -> bool:
        return self.result_changed or bool(self.changes)


def _matched_name(task_id: str, name: str) -> str:
    """``name``, with the run number of a key ``ctx.run_key`` built left out:
    ``T#run1/report`` of the old run and ``T#run2/report`` of the new one are
    the same entry of the task's code."""
    mark = f"{task_id}{RUN_MARK}"
    if not name.startswith(mark):
        return name
    _, _, rest = name[len(mark) :].partition("/")
    return f"{mark}*/{rest}"


def _keyed(
    task_id: str, entries: list[StepRecord]
) -> Iterator[tuple[tuple[str, str, int], StepRecord]]:
    """Each entry keyed by kind, name and which of that kind and name it is."""
    seen: dict[tuple[str, str], int] = defaultdict(int)
    for entry in entries:
        name = _matched_name(task_id, entry.name)
        seen[(entry.kind, name)] += 1
        yield (entry.kind, name, seen[(entry.kind, name)]), entry


def _differs(before: StepRecord, after: StepRecord) -> bool:
    return before.output != after.output or before.status != after.status


def _change(codec: str, before: StepRecord | None, after: StepRecord | None) -> EntryChange:
    some = after if after is not None else before
    assert some is not None
    how: Change = "added" if before is None else "removed" if after is None else "changed"
    return EntryChange(
        some.kind, some.name, how,
        None if before is None else before.seq, None if after is None else after.seq,
        None if before is None else value_view(before.output, codec),
        None if after is None else value_view(after.output, codec),
        None if before is None else before.status, None if after is None else after.status,
    )  # fmt: skip


def _compare(
    task: TaskRecord, old: list[StepRecord], new: list[StepRecord]
) -> tuple[list[EntryChange], int]:
    codec = task.codec
    olds = dict(_keyed(task.id, old))
    news = dict(_keyed(task.id, new))
    changes: list[EntryChange] = []
    unchanged = 0
    for key, after in news.items():
        before = olds.get(key)
        if before is None or _differs(before, after):
            changes.append(_change(codec, before, after))
        else:
            unchanged += 1
    changes += [_change(codec, before, None) for key, before in olds.items() if key not in news]
    return changes, unchanged


def task_diff(store: AdminStore, task: TaskRecord) -> TaskDiff | None:
    """The current run of ``task`` against the one it forked from (None: it was
    never rerun)."""
    if task.run < 2:
        return None
    previous = task.run - 1
    row = next(r for r in store.task_runs(task.id) if r.run == previous)
    old = [e for run, e in store.superseded_entries(task.id, previous) if run == previous]
    history = store.load_history(task.id)
    new = [history[seq] for seq in sorted(history) if seq >= row.fork_seq]
    changes, unchanged = _compare(task, old, new)
    kept = [e.name for e in new if e.kind == "op" and e.attempts == 0]
    return TaskDiff(
        task=task,
        forked_from=previous,
        fork_seq=row.fork_seq,
        fork_name=old[0].name if old else "",
        changes=changes,
        unchanged=unchanged,
        status_before=row.status,
        result_before=value_view(row.result, task.codec),
        result_after=value_view(task.result, task.codec),
        cost=calls_cost(task, new),
        kept_operations=kept,
    )


@dataclass(frozen=True, slots=True)
class BatchDiff:
    """Every rerun task of a batch (or of the store) against the run it forked
    from, and the totals."""

    batch: str | None
    tasks: list[TaskDiff]

    @property
    def results_changed(self) -> int:
        return sum(1 for diff in self.tasks if diff.result_changed)

    @property
    def tasks_changed(self) -> list[TaskDiff]:
        return [diff for diff in self.tasks if diff.changed]

    @property
    def unfinished(self) -> int:
        return sum(1 for diff in self.tasks if not diff.finished)

    @property
    def cost(self) -> CostLine:
        """What the rerun's model calls cost, in all."""
        total = CostLine(self.batch or "total")
        for diff in self.tasks:
            total.add(diff.cost)
        return total


def batch_diff(store: AdminStore, batch: str | None) -> BatchDiff:
    """``task_diff`` of each task of ``batch`` (None: every batch) whose
    current run is a rerun's, in enqueue order."""
    diffs = [task_diff(store, task) for task in store.forked_tasks(batch)]
    return BatchDiff(batch, [diff for diff in diffs if diff is not None])
