"""``cairn show TASK``: one task's header and its step timeline."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from cairn.admin import StepView, TaskView, task_view
from cairn.admin.lineage import RunView, lineage
from cairn.errors import UnknownTask
from cairn.store import AdminStore
from cairn.store.records import TaskRecord

from ._consoles import stdout_console
from ._field_text import (
    MISSING,
    human_duration,
    milliseconds,
    seconds_between,
    short_time,
    stored_value,
    view_error_line,
)
from ._json_output import JsonOption, print_json, step_dict, task_detail_dict
from ._store_option import DEFAULT_URL, StoreOption, opened_store
from ._tables import (
    RowTable,
    WideOption,
    key_values,
    print_table,
    status_text,
    task_status_text,
)

TaskArgument = Annotated[str, typer.Argument(metavar="TASK", help="The task id.")]

_STEP_COLUMNS = (
    "seq",
    "kind",
    "name",
    "status",
    "attempts",
    "start",
    "duration (ms)",
    "error",
)


def _unknown(store: AdminStore, task_id: str) -> UnknownTask:
    return UnknownTask(
        f"no task with id {task_id!r} in {store.url}; list task ids with `cairn tasks`",
        task_id=task_id,
    )


def get_task_or_fail(store: AdminStore, task_id: str) -> TaskRecord:
    """The task ``task_id``; an unknown id raises ``UnknownTask`` (exit 2)."""
    task = store.get_task(task_id)
    if task is None:
        raise _unknown(store, task_id)
    return task


def show_command(
    task_id: TaskArgument,
    store: StoreOption = DEFAULT_URL,
    as_json: JsonOption = False,
    wide: WideOption = False,
) -> None:
    """Show a task: status, attempts, arguments, result or error, and every step."""
    with opened_store(store) as opened:
        view = task_view(opened, task_id)
        if view is None:
            raise _unknown(opened, task_id)
        runs = lineage(opened, view.task) if view.task.run > 1 else []
    if as_json:
        print_json({**_json(view), "runs": [_run_dict(run) for run in runs]})
        return
    console = stdout_console()
    print_table(console, key_values(_header(view)))
    console.print()
    if runs:
        _print_runs(console, runs)
    _print_timeline(console, view.steps, wide=wide)


_RUN_COLUMNS = ("run", "status", "result or error", "forked at", "when", "by")


def _print_runs(console: Console, runs: list[RunView]) -> None:
    """The task's lineage: each run a rerun superseded, where the next forked."""
    table = RowTable(console, _RUN_COLUMNS, right=("run",), free=("result or error",))
    for run in runs:
        outcome = view_error_line(run.error) if run.status == "failed" else _value_line(run)
        table.add_row(
            str(run.run) + (" (now)" if run.current else ""),
            status_text(run.status),
            outcome,
            MISSING if run.fork_seq is None else f"{run.fork_seq} {run.fork_name or ''}".strip(),
            short_time(run.forked_at),
            run.forked_by or MISSING,
        )
    table.print()
    console.print(
        "each run shares the entries before its fork point with the next; "
        "`cairn diff TASK` shows what the latest rerun changed"
    )
    console.print()


def _value_line(run: RunView) -> str:
    value = run.result
    if value is None:
        return MISSING
    if value.blob is not None:
        return f"blob {value.blob.size} B"
    return " ".join((value.json_text or value.raw or "").split())


def _run_dict(run: RunView) -> dict[str, object]:
    return {
        "run": run.run,
        "current": run.current,
        "status": run.status,
        "fork_position": run.fork_seq,
        "fork_entry": run.fork_name,
        "forked_at": None if run.forked_at is None else run.forked_at.isoformat(),
        "forked_by": run.forked_by,
    }


def _json(view: TaskView) -> dict[str, object]:
    return {
        "task": {
            **task_detail_dict(view.task),
            "interruptions": view.interruptions,
            "parked_on": view.parked_on,
            "children": view.children,
            "conversations": [c.conv for c in view.conversations],
            "in_flight": None
            if view.in_flight is None
            else {
                "seq": view.in_flight.seq,
                "name": view.in_flight.name,
                "started_at": view.in_flight.started_at.isoformat(),
            },
        },
        "steps": [step_dict(s) for s in view.steps],
    }


def _gate_rows(task: TaskRecord) -> list[tuple[str, Text | str]]:
    """A debounced task's key, window and events; a singleton task's key."""
    rows: list[tuple[str, Text | str]] = []
    if task.debounce_key is not None:
        window = f"{(task.debounce_ms or 0) / 1000:g}s"
        line = f"key {task.debounce_key}, window {window}, {task.debounce_events} event(s)"
        if task.started_at is None and task.status in ("waiting", "pending"):
            line += (
                f"; runs from {short_time(task.wake_at)} unless another event of the key "
                f"comes first (each pushes it {window} on)"
            )
        rows.append(("debounce", line))
    if task.singleton_key is not None:
        rows.append(("singleton", f"key {task.singleton_key} (held while unfinished)"))
    if task.singleton_queued is not None:
        queued = task.status == "waiting"
        rows.append(
            (
                "singleton",
                f"queued behind the task holding key {task.singleton_queued}; pending once it ends"
                if queued
                else f"was queued behind key {task.singleton_queued}",
            )
        )
    return rows


def _header(view: TaskView) -> list[tuple[str, Text | str]]:
    task = view.task
    attempts = str(task.attempts - task.retry_base)
    if task.retry_base:
        attempts += f" since the last retry ({task.attempts} in all)"
    rows: list[tuple[str, Text | str]] = [
        ("task", task.id),
        ("batch", task.batch or MISSING),
        ("function", task.name),
        ("status", task_status_text(task.status, task.owner)),
        ("attempts", attempts),
    ]
    if task.run > 1:
        rows.append(("run", f"{task.run} (a rerun from a step; the earlier runs below)"))
    if task.status == "running":
        if view.in_flight is not None:
            now = view.in_flight
            rows.append(("in step", f"{now.name} (#{now.seq}) since {short_time(now.started_at)}"))
        rows.append(("owner", task.owner or MISSING))
        rows.append(("lease until", short_time(task.lease_expires_at)))
    if view.parked_on is not None:
        scope, _, name = view.parked_on.partition(":")
        raise_it = f"cairn budget {name}" if scope == "batch" else f"cairn budget --task {name}"
        rows.append(("parked", f"on budget {view.parked_on}; goes on after {raise_it} --raise"))
    rows += _gate_rows(task)
    if view.parked_on is not None or task.singleton_queued is not None:
        pass  # said above: parked on a budget, or queued behind a singleton key
    elif task.status == "waiting":
        wakes = (
            "when signalled (cairn signal)"
            if task.wake_at is None
            else f"{short_time(task.wake_at)}, or sooner when signalled (cairn signal)"
        )
        rows.append(("wakes", wakes))
    if task.interruptions:
        rows.append(("interruptions", f"{task.interruptions} (taken over while running)"))
    if task.parent_id is not None:
        rows.append(("parent", task.parent_id))
    if view.children:
        rows.append(("children", ", ".join(view.children)))
    if view.conversations:
        rows.append(("conversations", ", ".join(c.conv for c in view.conversations)))
    rows += [
        ("started", short_time(task.started_at)),
        ("finished", short_time(task.finished_at)),
        ("duration", human_duration(seconds_between(task.started_at, task.finished_at))),
        ("args", stored_value(task.args, task.codec)),
    ]
    if task.status == "completed":
        rows.append(("result", stored_value(task.result, task.codec)))
    if task.error is not None:
        # A pending or running task keeps the error of its previous attempt.
        label = "error" if task.status == "failed" else "last error"
        rows.append((label, Text(view_error_line(view.error), style="red")))
    return rows


def _print_timeline(console: Console, steps: list[StepView], *, wide: bool) -> None:
    if not steps:
        console.print("no steps recorded yet")
        return
    table = RowTable(
        console,
        _STEP_COLUMNS,
        right=("seq", "attempts", "duration (ms)"),
        free=("error",),
        wide=wide,
    )
    for step in steps:
        # A spawn names the child it started, so `cairn show CHILD` is one copy away.
        name = step.name if step.child_task_id is None else f"{step.name} -> {step.child_task_id}"
        table.add_row(
            str(step.seq),
            step.kind,
            name,
            _status(step),
            str(step.attempts),
            short_time(step.started_at),
            milliseconds(seconds_between(step.started_at, step.finished_at)),
            Text(view_error_line(step.error), style="red"),
        )
    table.print()
    for step in steps:
        if step.kept is not None:
            console.print(
                f"position {step.seq}: {step.name!r} was kept: its code changed since it was "
                f"recorded ({step.fingerprint} -> {step.kept}) and on_change='keep' replayed "
                "the recorded result (docs/versions.md)"
            )


def _status(step: StepView) -> Text:
    """The entry's status, marked when ``keep`` replayed it across a code change."""
    shown = status_text(step.status)
    if step.kept is not None:
        shown.append(" (kept)", style="yellow")
    return shown
