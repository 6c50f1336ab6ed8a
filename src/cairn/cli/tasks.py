"""``cairn tasks``: tasks in enqueue order, filtered by batch and status, streamed."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import Annotated

import typer

from cairn.store.records import TASK_STATUSES, TaskRecord

from ._consoles import fail, note, stdout_console
from ._field_text import error_line, human_duration, seconds_between, short_time
from ._json_output import JsonOption, stream_json_list, task_dict
from ._store_option import DEFAULT_URL, StoreOption, opened_store, require_batch, streamed
from ._tables import RowTable, status_text

DEFAULT_LIMIT = 200
_COLUMNS = ("id", "status", "attempts", "started", "finished", "duration", "error")

BatchFilter = Annotated[str | None, typer.Option("--batch", "-b", help="Only this batch.")]
StatusFilter = Annotated[
    str | None,
    typer.Option("--status", "-s", help=f"Only this status: {', '.join(TASK_STATUSES)}."),
]
Limit = Annotated[
    int, typer.Option("--limit", "-n", min=0, help="Show at most this many tasks (0: all).")
]


def check_status(status: str | None) -> None:
    """Stop with a clear line unless ``status`` is one of the five task statuses."""
    if status is not None and status not in TASK_STATUSES:
        fail(f"unknown status {status!r}; use one of: {', '.join(TASK_STATUSES)}")


def tasks_command(
    store: StoreOption = DEFAULT_URL,
    batch: BatchFilter = None,
    status: StatusFilter = None,
    limit: Limit = DEFAULT_LIMIT,
    as_json: JsonOption = False,
) -> None:
    """List tasks with their status, attempts, times and last error."""
    check_status(status)
    with opened_store(store) as opened:
        if batch is not None:
            require_batch(opened, batch)
        # One row past the limit tells whether more exist, without counting them all.
        fetch = None if limit == 0 else limit + 1
        with streamed(opened.list_tasks(batch=batch, status=status, limit=fetch)) as rows:
            shown = islice(rows, None if limit == 0 else limit)
            count = _print(shown, as_json=as_json)
            more = next(rows, None) is not None
    if more:
        note(f"showing the first {limit} task(s); more exist (raise --limit, or --limit 0 for all)")
    elif count == 0 and not as_json:
        note("no tasks match")


def _print(rows: Iterator[TaskRecord], *, as_json: bool) -> int:
    if as_json:
        return stream_json_list(task_dict(task) for task in rows)
    table = RowTable(stdout_console(), _COLUMNS, right=("attempts", "duration"), free=("error",))
    for task in rows:
        table.add_row(
            task.id,
            status_text(task.status),
            str(task.attempts - task.retry_base),
            short_time(task.started_at),
            short_time(task.finished_at),
            human_duration(seconds_between(task.started_at, task.finished_at)),
            error_line(task.error),
        )
    if table.row_count:
        table.print()
    return table.row_count
