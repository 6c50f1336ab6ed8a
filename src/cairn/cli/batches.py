"""``cairn batches``: every batch with its task counts by status; ``cairn
batches NAME``: one batch's progress (rate, ETA, failures by type, slowest
steps), as the admin API (``cairn.admin.batches``) reads it."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.text import Text

from cairn.admin import BatchView, batch_view
from cairn.admin.batches import status_counts
from cairn.clock import SystemClock
from cairn.store.records import TASK_STATUSES, BatchSummary

from ._consoles import note, stdout_console
from ._field_text import MISSING, clip, human_duration, short_time
from ._json_output import JsonOption, batch_dict, print_json
from ._store_option import DEFAULT_URL, StoreOption, opened_store, require_batch
from ._tables import STATUS_STYLES, RowTable, key_values, print_table

_COLUMNS = ("batch", "task", *TASK_STATUSES, "total", "first start", "last finish")
_MESSAGE_WIDTH = 80


def batches_command(
    name: Annotated[
        str | None,
        typer.Argument(metavar="[BATCH]", help="Show this batch's progress instead."),
    ] = None,
    store: StoreOption = DEFAULT_URL,
    as_json: JsonOption = False,
) -> None:
    """List batches with how many tasks are pending, running, completed, failed, cancelled.

    With a BATCH: its progress: counts, rate and ETA, failures grouped by error
    type with an example task each, and its slowest kinds of step.
    """
    with opened_store(store) as opened:
        if name is not None:
            require_batch(opened, name)
            view = batch_view(opened, name, SystemClock().now())
            summaries = []
        else:
            view = None
            summaries = opened.batch_summaries()
    if view is not None:
        _print_view(view, as_json=as_json)
        return
    if as_json:
        print_json([batch_dict(summary) for summary in summaries])
        return
    if not summaries:
        note(f"no batches in {store}")
        return
    _print_batches(summaries)


def _count_cell(status: str, count: int) -> Text:
    # Zeros stay plain so the eye goes to the counts that matter.
    return Text(str(count), style=STATUS_STYLES[status] if count else "dim")


def _print_batches(summaries: list[BatchSummary]) -> None:
    table = RowTable(stdout_console(), _COLUMNS, right=(*TASK_STATUSES, "total"))
    for summary in summaries:
        counts = [_count_cell(s, n) for s, n in status_counts(summary).items()]
        table.add_row(
            summary.name,
            summary.task_name,
            *counts,
            str(summary.total),
            short_time(summary.first_started_at),
            short_time(summary.last_finished_at),
        )
    table.print()


def _view_dict(view: BatchView) -> dict[str, Any]:
    return {
        **batch_dict(view.summary),
        "done": view.done,
        "rate_per_minute": view.rate_per_minute,
        "eta_seconds": view.eta_seconds,
        "failures": [
            {
                "error_type": f.error_type,
                "count": f.count,
                "example_task_id": f.example_task_id,
                "example_message": f.example_message,
            }
            for f in view.failures
        ],
        "slowest_steps": [
            {
                "name": s.name,
                "count": s.count,
                "max_seconds": s.max_seconds,
                "median_seconds": s.median_seconds,
            }
            for s in view.slowest_steps
        ],
    }


def _print_view(view: BatchView, *, as_json: bool) -> None:
    if as_json:
        print_json(_view_dict(view))
        return
    console = stdout_console()
    rate = MISSING if view.rate_per_minute is None else f"{view.rate_per_minute:.1f} tasks/min"
    eta = "-" if view.eta_seconds is None else human_duration(view.eta_seconds)
    if view.counts.get("waiting"):
        eta += f" ({view.counts['waiting']} waiting for a signal, not counted)"
    counts = ", ".join(f"{n} {status}" for status, n in view.counts.items() if n)
    print_table(
        console,
        key_values(
            [
                ("batch", view.name),
                ("task", view.summary.task_name),
                ("done", f"{view.done} of {view.total} ({counts or 'no tasks'})"),
                ("rate", rate),
                ("eta", eta if view.done < view.total else "finished"),
            ]
        ),
    )
    if view.failures:
        console.print()
        table = RowTable(
            console,
            ("error type", "tasks", "example", "message"),
            right=("tasks",),
            free=("message",),
        )
        for f in view.failures:
            table.add_row(
                f.error_type,
                str(f.count),
                f.example_task_id,
                clip(" ".join(f.example_message.split()), _MESSAGE_WIDTH),
            )
        table.print()
    if view.slowest_steps:
        console.print()
        table = RowTable(
            console, ("step", "count", "max", "median"), right=("count", "max", "median")
        )
        for s in view.slowest_steps:
            table.add_row(
                s.name,
                str(s.count),
                human_duration(s.max_seconds),
                human_duration(s.median_seconds),
            )
        table.print()
