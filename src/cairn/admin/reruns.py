"""A rerun from a step: a new run of finished tasks that keeps every entry
before the fork point and runs the rest with the current code.

``plan_rerun`` says, before anything changes, where each task would fork (the
first position whose entry has the name asked for, or a position given), which
entries would run again, what their recorded model calls cost (tokens and
estimated cost, as ``cairn check`` prices a re-run), and which operations after
the fork point the new run will find done and not call again. ``apply_rerun``
makes the new runs: one transaction per task (``AdminStore.fork_task``), the
old run kept readable (``cairn.admin.lineage``); the tasks are pending again,
for the next ``run_batch``, ``app.run`` or worker. The whole action is one
entry of the audit trail. The rules are in docs/reruns.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime

from cairn.admin.audit import Actor, api_actor, audit
from cairn.agent.costs import CostLine, line_of
from cairn.keys import RUN_MARK
from cairn.store import AdminStore
from cairn.store.records import RecordedCall, StepRecord, TaskRecord
from cairn.store.reports import TaskQuery

__all__ = [
    "RERUNNABLE",
    "ForkPoint",
    "RerunDone",
    "RerunPlan",
    "RerunTask",
    "apply_rerun",
    "calls_cost",
    "is_run_key",
    "plan_rerun",
    "rerun_candidates",
]

RERUNNABLE = ("completed", "failed", "cancelled")
# A batch's tasks taken when no status is given: those that ran to an end.
DEFAULT_STATUSES = ("completed", "failed")


@dataclass(frozen=True, slots=True)
class ForkPoint:
    """Where a rerun forks: at the first entry named ``step``, or at position ``seq``."""

    step: str | None = None
    seq: int | None = None

    def __post_init__(self) -> None:
        if (self.step is None) == (self.seq is None):
            raise ValueError("say where to rerun from: a step's name or a position, not both")
        if self.seq is not None and self.seq < 1:
            raise ValueError(f"positions start at 1; {self.seq} asked for")

    def __str__(self) -> str:
        return f"--seq {self.seq}" if self.step is None else f"--from {self.step}"

    def find(self, history: dict[int, StepRecord]) -> int | None:
        """The position to fork at in ``history``, if it has one."""
        if self.seq is not None:
            return self.seq if self.seq in history else None
        return next((seq for seq in sorted(history) if history[seq].name == self.step), None)


def is_run_key(key: str, task: TaskRecord) -> bool:
    """Whether ``key`` was built by ``ctx.run_key`` in the task's current run
    (a rerun makes a new key of it, so its effect happens again)."""
    return key.startswith(f"{task.id}{RUN_MARK}{task.run}/")


def _conversation_call(entry: StepRecord) -> bool:
    """A conversation's model call or compaction: its reply is a row of the
    conversation, which is only ever appended to, so no new run can redo it."""
    if entry.kind == "conv":
        return True
    if entry.kind != "llm" or entry.output is None:
        return False
    try:
        output = json.loads(entry.output)
    except ValueError:
        return False
    return isinstance(output, dict) and "idx" in output


def calls_cost(task: TaskRecord, entries: Iterable[StepRecord]) -> CostLine:
    """The recorded tokens and estimated cost of the model calls among ``entries``."""
    line = CostLine(task.id)
    for entry in entries:
        if entry.kind in ("llm", "conv") and entry.status == "completed":
            call = RecordedCall(
                task.id, task.batch, task.codec, entry.seq, entry.kind, entry.name, entry.output
            )
            line.add(line_of(call, None))
    return line


@dataclass(frozen=True, slots=True)
class RerunTask:
    """One task's part of a rerun: where it forks (None: it is left alone, and
    ``skipped`` says why), the entries that run again, what their model calls
    cost when they were recorded, and the operation keys from the fork point
    on that the new run will find done (not called again)."""

    task: TaskRecord
    seq: int | None
    repeats: list[StepRecord] = field(default_factory=list)
    cost: CostLine | None = None
    kept_operations: list[str] = field(default_factory=list)
    skipped: str | None = None

    @property
    def step(self) -> str:
        """The name of the entry the rerun forks at."""
        return self.repeats[0].name if self.repeats else ""

    @property
    def steps(self) -> list[str]:
        """The names of the entries that run again, in order (``map`` items
        and other entries included)."""
        return [entry.name for entry in self.repeats]


def _plan_one(store: AdminStore, task: TaskRecord, point: ForkPoint) -> RerunTask:
    if task.status not in RERUNNABLE:
        return RerunTask(
            task,
            None,
            skipped=f"task {task.id} is {task.status}; only a finished task (completed, "
            f"failed or cancelled) can be rerun: cancel it first",
        )
    history = store.load_history(task.id)
    seq = point.find(history)
    if seq is None:
        where = f"no entry named {point.step!r}" if point.step else f"no entry at {point.seq}"
        return RerunTask(task, None, skipped=f"task {task.id} has {where} in its history")
    repeats = [history[at] for at in sorted(history) if at >= seq]
    held = next((entry for entry in repeats if _conversation_call(entry)), None)
    if held is not None:
        return RerunTask(
            task,
            None,
            repeats,
            skipped=f"task {task.id}: position {held.seq} ({held.kind} {held.name!r}) belongs "
            "to a conversation, whose rows are only ever appended to, so no new run can "
            "make it again; rerun from a step after it",
        )
    kept = [e.name for e in repeats if e.kind == "op" and not is_run_key(e.name, task)]
    return RerunTask(task, seq, repeats, calls_cost(task, repeats), kept)


@dataclass(frozen=True, slots=True)
class RerunPlan:
    """What a rerun would do, task by task, before anything changes."""

    point: ForkPoint
    tasks: list[RerunTask]

    @property
    def runnable(self) -> list[RerunTask]:
        return [task for task in self.tasks if task.skipped is None]

    @property
    def skipped(self) -> list[RerunTask]:
        return [task for task in self.tasks if task.skipped is not None]

    @property
    def cost(self) -> CostLine:
        """The recorded model calls the runnable tasks would repeat, in all."""
        total = CostLine("total")
        for task in self.runnable:
            if task.cost is not None:
                total.add(task.cost)
        return total


def rerun_candidates(store: AdminStore, query: TaskQuery) -> Iterable[TaskRecord]:
    """The tasks a rerun of ``query`` considers: those it picks, and without a
    status, only the completed and failed ones."""
    if query.status is not None:
        yield from store.list_tasks(query=query)
        return
    for status in DEFAULT_STATUSES:
        yield from store.list_tasks(query=replace(query, status=status))


def plan_rerun(store: AdminStore, tasks: Iterable[TaskRecord], point: ForkPoint) -> RerunPlan:
    """Where each of ``tasks`` would fork at ``point``, and what would run
    again; reads only."""
    return RerunPlan(point, [_plan_one(store, task, point) for task in tasks])


@dataclass(frozen=True, slots=True)
class RerunDone:
    """What a rerun made: the tasks forked (now pending, at their next run),
    and those left alone with the reason (the plan's, or a change meanwhile)."""

    forked: list[RerunTask]
    left: list[tuple[str, str]]

    def summary(self, point: ForkPoint) -> str:
        text = f"{len(self.forked)} task(s) rerun {point}"
        return text + (f"; {len(self.left)} left alone" if self.left else "")


def apply_rerun(
    store: AdminStore,
    plan: RerunPlan,
    now: datetime,
    *,
    target: str,
    actor: Actor | None = None,
) -> RerunDone:
    """Make the runs ``plan`` says, each task in one transaction, as ``actor``
    on ``target`` (the task or filter, for the audit trail). A task that changed
    since the plan was made (another rerun, a retry) is left alone."""
    who = actor or api_actor()
    forked: list[RerunTask] = []
    left = [(task.task.id, task.skipped or "") for task in plan.skipped]
    detail = {"from": plan.point.step, "seq": plan.point.seq, "planned": len(plan.runnable)}
    with audit(store, who, "rerun", target, now, detail) as entry:
        for task in plan.runnable:
            assert task.seq is not None  # runnable
            if store.fork_task(task.task.id, task.task.run, task.seq, now, str(who)):
                forked.append(task)
            else:
                left.append((task.task.id, f"task {task.task.id} changed just now; look again"))
        done = RerunDone(forked, left)
        entry.done(len(forked), done.summary(plan.point))
    return done
