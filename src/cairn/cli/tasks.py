"""``cairn tasks``: tasks filtered by batch, status, name, time and search;
streamed in enqueue order, or a page at a time newest first with a total.

Tasks cairn runs for itself (stall alerts, daily reports: names starting
``cairn.``) are left out unless ``--all``. The listing is the admin API's
(``cairn.admin.listing``), the dashboard's too.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import Annotated

import typer

from cairn.admin import BadCursor, TaskPage, TaskQuery, iter_tasks, task_page
from cairn.admin.listing import MAX_SIZE
from cairn.clock import SystemClock
from cairn.store import AdminStore
from cairn.store.records import TASK_STATUSES, TaskRecord

from ._consoles import fail, note, stdout_console
from ._field_text import error_line, human_duration, seconds_between, short_time
from ._json_output import JsonOption, print_json, stream_json_list, task_dict
from ._store_option import DEFAULT_URL, StoreOption, opened_store, require_batch, streamed
from ._tables import RowTable, WideOption, task_list_status
from .ops import parse_since

DEFAULT_LIMIT = 200
_COLUMNS = ("id", "status", "attempts", "started", "finished", "duration", "error")

BatchFilter = Annotated[str | None, typer.Option("--batch", "-b", help="Only this batch.")]
StatusFilter = Annotated[
    str | None,
    typer.Option("--status", "-s", help=f"Only this status: {', '.join(TASK_STATUSES)}."),
]
NameFilter = Annotated[
    str | None, typer.Option("--name", help="Only tasks of this function (its task name).")
]
SearchFilter = Annotated[
    str | None,
    typer.Option(
        "--search",
        "-q",
        help="Only tasks whose id, name or error holds TEXT (any case).",
        metavar="TEXT",
    ),
]
_TIME_HELP = "ISO 8601 (a time without an offset is UTC) or an age such as 90m, 24h, 7d."
SinceFilter = Annotated[
    str | None,
    typer.Option(
        "--since", metavar="TIME", help=f"Only tasks created at or after TIME: {_TIME_HELP}"
    ),
]
UntilFilter = Annotated[
    str | None,
    typer.Option("--until", metavar="TIME", help=f"Only tasks created before TIME: {_TIME_HELP}"),
]
AllOption = Annotated[
    bool,
    typer.Option(
        "--all",
        "--internal",
        help="Include the tasks cairn runs for itself (stall alerts, reports: cairn.*).",
    ),
]
Limit = Annotated[
    int,
    typer.Option(
        "--limit", "-n", min=0, help="Show at most this many tasks (0: all; a page: 1 to 1000)."
    ),
]
NewestOption = Annotated[
    bool,
    typer.Option(
        "--newest", help="One page, newest first, with the total and the cursors of the next pages."
    ),
]
OlderOption = Annotated[
    str | None,
    typer.Option(
        "--older-than", metavar="CURSOR", help="The page older than CURSOR (implies --newest)."
    ),
]
NewerOption = Annotated[
    str | None,
    typer.Option(
        "--newer-than", metavar="CURSOR", help="The page newer than CURSOR (implies --newest)."
    ),
]


def check_status(status: str | None) -> None:
    """Stop with a clear line unless ``status`` is one of the task statuses."""
    if status is not None and status not in TASK_STATUSES:
        fail(f"unknown status {status!r}; use one of: {', '.join(TASK_STATUSES)}")


def _query(
    status: str | None,
    batch: str | None,
    name: str | None,
    times: tuple[str | None, str | None],
    search: str | None,
    everything: bool,
) -> TaskQuery:
    check_status(status)
    now = SystemClock().now()
    since, until = (
        None if text is None else parse_since(text, now, option=option)
        for text, option in zip(times, ("--since", "--until"), strict=True)
    )
    return TaskQuery(status, batch, name, since, until, search or None, everything)


def tasks_command(
    store: StoreOption = DEFAULT_URL,
    batch: BatchFilter = None,
    status: StatusFilter = None,
    name: NameFilter = None,
    search: SearchFilter = None,
    since: SinceFilter = None,
    until: UntilFilter = None,
    everything: AllOption = False,
    limit: Limit = DEFAULT_LIMIT,
    newest: NewestOption = False,
    older_than: OlderOption = None,
    newer_than: NewerOption = None,
    as_json: JsonOption = False,
    wide: WideOption = False,
) -> None:
    """List tasks with their status, attempts, times and last error.

    In enqueue order by default; with --newest (or a cursor) one page, newest
    first, with the total and the commands for the pages either side.
    """
    query = _query(status, batch, name, (since, until), search, everything)
    paged = newest or older_than is not None or newer_than is not None
    if paged and not 1 <= limit <= MAX_SIZE:
        fail(f"a page holds 1 to {MAX_SIZE} tasks; give --limit between them, not {limit}")
    with opened_store(store) as opened:
        if batch is not None:
            require_batch(opened, batch)
        if paged:
            _print_page(
                _page(opened, query, older_than, newer_than, limit), as_json=as_json, wide=wide
            )
            return
        # One row past the limit tells whether more exist, without counting them all.
        fetch = None if limit == 0 else limit + 1
        with streamed(iter_tasks(opened, query, limit=fetch)) as rows:
            shown = islice(rows, None if limit == 0 else limit)
            count = _print(shown, as_json=as_json, wide=wide)
            more = next(rows, None) is not None
    if more:
        note(f"showing the first {limit} task(s); more exist (raise --limit, or --limit 0 for all)")
    elif count == 0 and not as_json:
        note("no tasks match")


def _page(
    store: AdminStore, query: TaskQuery, older: str | None, newer: str | None, size: int
) -> TaskPage:
    try:
        return task_page(store, query, older_than=older, newer_than=newer, size=size)
    except (BadCursor, ValueError) as exc:
        fail(str(exc))


def _print_page(page: TaskPage, *, as_json: bool, wide: bool) -> None:
    if as_json:
        print_json(
            {
                "tasks": [task_dict(task) for task in page.rows],
                "total": page.total,
                "total_is_at_least": page.total_capped,
                "newer": page.newer,
                "older": page.older,
            }
        )
        return
    shown = _print(iter(page.rows), as_json=False, wide=wide)
    total = f"more than {page.total}" if page.total_capped else str(page.total)
    note(f"{shown} of {total} matching task(s), newest first")
    if page.newer is not None:
        note(f"newer: add --newer-than {page.newer}")
    if page.older is not None:
        note(f"older: add --older-than {page.older}")


def _print(rows: Iterator[TaskRecord], *, as_json: bool, wide: bool) -> int:
    if as_json:
        return stream_json_list(task_dict(task) for task in rows)
    table = RowTable(
        stdout_console(), _COLUMNS, right=("attempts", "duration"), free=("error",), wide=wide
    )
    for task in rows:
        table.add_row(
            task.id,
            task_list_status(task),
            str(task.attempts - task.retry_base),
            short_time(task.started_at),
            short_time(task.finished_at),
            human_duration(seconds_between(task.started_at, task.finished_at)),
            error_line(task.error),
        )
    if table.row_count:
        table.print()
    return table.row_count
