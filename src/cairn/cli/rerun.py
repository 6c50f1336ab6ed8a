"""``cairn rerun``: a new run of finished tasks from a chosen step.

The new run keeps every entry recorded before the step (the first position
whose entry has that name, or ``--seq N``) and runs the rest with the current
code; the old run stays readable (``cairn show``, ``cairn diff``). Each task
is forked in one transaction (``cairn.admin.reruns``); the tasks are pending
again, for the next ``run_batch``, ``app.run`` or worker. ``--dry-run`` says
what would run again and what its recorded model calls cost, changing nothing.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.text import Text

from cairn.admin.reruns import (
    ForkPoint,
    RerunPlan,
    RerunTask,
    apply_rerun,
    plan_rerun,
    rerun_candidates,
)
from cairn.clock import SystemClock
from cairn.store import AdminStore
from cairn.store.reports import TaskQuery

from ._actor import cli_actor
from ._consoles import fail, note, stdout_console
from ._json_output import JsonOption, print_json
from ._store_option import DEFAULT_URL, StoreOption, opened_store, require_batch
from ._tables import RowTable
from .show import get_task_or_fail

_COLUMNS = ("task", "from", "runs again", "calls", "tokens", "est. $", "found done")
_STATUSES = ("completed", "failed", "cancelled")
_LISTED = 20
_USAGE = (
    "say which tasks and from where: `cairn rerun TASK --from STEP` or "
    "`cairn rerun --batch B --from STEP` (or --seq N instead of --from)"
)


def rerun_command(
    task_id: Annotated[
        str | None, typer.Argument(metavar="[TASK]", help="The task to rerun.")
    ] = None,
    step: Annotated[
        str | None,
        typer.Option("--from", metavar="STEP", help="Rerun from the first entry of this name."),
    ] = None,
    seq: Annotated[
        int | None,
        typer.Option("--seq", min=1, metavar="N", help="Rerun from position N instead."),
    ] = None,
    batch: Annotated[
        str | None, typer.Option("--batch", "-b", help="Rerun the tasks of this batch.")
    ] = None,
    status: Annotated[
        str | None,
        typer.Option(
            "--status",
            metavar="STATUS",
            help="With --batch: only its tasks of this status (completed, failed or "
            "cancelled); without it, its completed and failed tasks.",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would run again; change nothing.")
    ] = False,
    store: StoreOption = DEFAULT_URL,
    as_json: JsonOption = False,
) -> None:
    """Make a new run of finished tasks that keeps every entry before STEP and
    runs the rest with the current code.

    The old run stays readable (`cairn show`, `cairn diff`). An operation after
    STEP whose key names the effect (op_key) is found done and not called again;
    one keyed with ctx.run_key is made again. The tasks are pending again: the
    next run_batch of their batch (or a worker) runs them.
    """
    point = _point(task_id, batch, status, step, seq)
    with opened_store(store) as opened:
        plan, target = _plan(opened, task_id, batch, status, point)
        if dry_run:
            _report(plan, as_json, done=None)
            return
        done = apply_rerun(opened, plan, SystemClock().now(), target=target, actor=cli_actor())
    forked = {task.task.id for task in done.forked}
    _report(plan, as_json, done=forked)
    if not forked:
        raise typer.Exit(1)


def _point(
    task_id: str | None, batch: str | None, status: str | None, step: str | None, seq: int | None
) -> ForkPoint:
    if (task_id is None) == (batch is None):
        fail(_USAGE)
    if (step is None) == (seq is None):
        fail(f"give --from STEP or --seq N (one of them); {_USAGE}")
    if status is not None and batch is None:
        fail("--status goes with --batch; `cairn rerun TASK` reruns that task")
    if status is not None and status not in _STATUSES:
        fail(f"--status {status!r}: a rerun takes {', '.join(_STATUSES)} tasks")
    return ForkPoint(step=step, seq=seq)


def _plan(
    store: AdminStore, task_id: str | None, batch: str | None, status: str | None, point: ForkPoint
) -> tuple[RerunPlan, str]:
    if task_id is not None:
        task = get_task_or_fail(store, task_id)
        return plan_rerun(store, [task], point), f"task {task_id}"
    assert batch is not None  # _point made sure
    require_batch(store, batch)
    query = TaskQuery(batch=batch, status=status)
    target = f"batch {batch}" + (f" ({status})" if status else "")
    return plan_rerun(store, rerun_candidates(store, query), point), target


def _row(task: RerunTask) -> list[str]:
    cost = task.cost
    assert cost is not None  # a runnable task's
    again = ", ".join(task.steps)
    return [
        task.task.id,
        f"{task.seq} {task.step}",
        again if len(again) <= 60 else again[:57] + "...",
        str(cost.calls),
        str(cost.usage.input_tokens + cost.usage.output_tokens),
        f"{cost.cost:.4f}",
        ", ".join(task.kept_operations) or "-",
    ]


def _report(plan: RerunPlan, as_json: bool, done: set[str] | None) -> None:
    if as_json:
        print_json(_json(plan, done))
        return
    console = stdout_console()
    runnable = [t for t in plan.runnable if done is None or t.task.id in done]
    if runnable:
        table = RowTable(console, _COLUMNS, right=("calls", "tokens", "est. $"))
        for task in runnable[:_LISTED]:
            table.add_row(*_row(task))
        table.print()
        if len(runnable) > _LISTED:
            console.print(f"... and {len(runnable) - _LISTED} more")
    _totals(plan, runnable, done)


def _totals(plan: RerunPlan, runnable: list[RerunTask], done: set[str] | None) -> None:
    cost = plan.cost
    tokens = cost.usage.input_tokens + cost.usage.output_tokens
    repeats = f"{cost.calls} model call(s), {tokens} tokens, est. ${cost.cost:.4f}"
    verb = "would be rerun" if done is None else "rerun"
    said = f"{len(runnable)} task(s) {verb} {plan.point}: they repeat {repeats} as recorded"
    stdout_console().print(Text(said), soft_wrap=True)
    kept = sum(len(t.kept_operations) for t in runnable)
    if kept:
        note(
            f"{kept} operation(s) after the fork point have keys that name their effect for "
            "good: the new run finds them done and does not call them again. Key an effect "
            "with ctx.run_key(...) to make it again in each run (docs/reruns.md)"
        )
    left = plan.skipped if done is None else [t for t in plan.tasks if t not in runnable]
    for task in left[:_LISTED]:
        note(task.skipped or f"task {task.task.id} changed just now; look again")
    if len(left) > _LISTED:
        note(f"... and {len(left) - _LISTED} more left alone")
    if done is not None and runnable:
        note("they are pending: the next run_batch of their batch (or a worker) runs them")


def _json(plan: RerunPlan, done: set[str] | None) -> dict[str, Any]:
    tasks = []
    for task in plan.tasks:
        cost = task.cost
        tasks.append(
            {
                "task": task.task.id,
                "position": task.seq,
                "step": task.step or None,
                "runs_again": task.steps,
                "calls": 0 if cost is None else cost.calls,
                "input_tokens": 0 if cost is None else cost.usage.input_tokens,
                "output_tokens": 0 if cost is None else cost.usage.output_tokens,
                "estimated_cost": 0.0 if cost is None else round(cost.cost, 6),
                "found_done": task.kept_operations,
                "skipped": task.skipped,
                "rerun": done is not None and task.task.id in done,
            }
        )
    return {"dry_run": done is None, "from": str(plan.point), "tasks": tasks}
