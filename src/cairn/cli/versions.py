"""``cairn versions``: the app versions tasks in flight started on (or, not
started yet, were enqueued under),
and which of them no running worker will take."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

import typer

from cairn.observe._time import parse_duration
from cairn.store.records import TASK_STATUSES
from cairn.versions import versions_report

from ._consoles import fail, note, stdout_console
from ._json_output import JsonOption, print_json
from ._store_option import DEFAULT_URL, StoreOption, opened_store
from ._tables import RowTable

SeenWithinOption = Annotated[
    str,
    typer.Option(
        "--seen-within",
        metavar="DURATION",
        help="A worker counts as running if its row was written this recently (workers "
        "write theirs every 10s).",
    ),
]


def versions_command(
    store: StoreOption = DEFAULT_URL,
    seen_within: SeenWithinOption = "60s",
    as_json: JsonOption = False,
) -> None:
    """Unfinished tasks by the version they started on (or were enqueued under), with how many
    running workers claim each; warns about tasks no running worker can take."""
    try:
        within = parse_duration(seen_within)
    except ValueError as exc:
        fail(str(exc))
    with opened_store(store) as opened:
        lines = versions_report(opened, datetime.now(UTC), timedelta(seconds=within))
    if as_json:
        print_json({"versions": [line.to_json() for line in lines]})
        return
    if not lines:
        note("no unfinished tasks")
        return
    statuses = [s for s in TASK_STATUSES if any(s in line.counts for line in lines)]
    view = RowTable(
        stdout_console(), ("version", *statuses, "workers"), right=(*statuses, "workers")
    )
    for line in lines:
        counts = [str(line.counts.get(status, 0)) for status in statuses]
        view.add_row(line.version or "(none)", *counts, str(line.workers))
    view.print()
    for line in lines:
        if line.unroutable:
            note(_warning(line.version, sum(line.counts.values())))


def _warning(version: str | None, tasks: int) -> str:
    if version is None:
        return (
            f"warning: {tasks} task(s) of no version are unfinished and no "
            "worker is running (any worker takes them)"
        )
    return (
        f"warning: {tasks} task(s) of version {version!r} are unfinished and no running "
        "worker claims that version; start one with "
        f"`cairn worker MODULE:APP --versions {version}`"
    )
