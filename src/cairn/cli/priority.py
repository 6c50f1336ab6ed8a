"""``cairn priority``: change the priority of tasks that have not run yet."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from cairn.admin import set_batch_priority, set_priority
from cairn.clock import SystemClock

from ._actor import cli_actor
from ._consoles import fail, stdout_console
from ._store_option import DEFAULT_URL, StoreOption, opened_store


def priority_command(
    priority: Annotated[
        int, typer.Argument(metavar="PRIORITY", help="The new priority: higher runs first.")
    ],
    task_id: Annotated[
        str | None, typer.Argument(metavar="[TASK]", help="The task to change.")
    ] = None,
    batch: Annotated[
        str | None,
        typer.Option("--batch", "-b", help="Change every pending or waiting task of this batch."),
    ] = None,
    store: StoreOption = DEFAULT_URL,
) -> None:
    """Give a pending or waiting task (or every one of a batch) PRIORITY.

    Workers claim the highest priority first and, within one priority, the
    oldest task (docs/workers.md). A running or finished task keeps its own.
    The change is written to the audit trail (`cairn audit`). A negative PRIORITY
    goes after `--`, with the options before it: `cairn priority --store URL -- -5 TASK`.
    """
    if (task_id is None) == (batch is None):
        fail("name one TASK or --batch BATCH (not both), e.g. cairn priority 10 --batch nightly")
    now = SystemClock().now()
    with opened_store(store) as opened:
        if batch is not None:
            applied = set_batch_priority(opened, batch, priority, now, actor=cli_actor())
        else:
            assert task_id is not None
            applied = set_priority(opened, task_id, priority, now, actor=cli_actor())
    if applied.refused or (task_id is not None and not applied.changed):
        fail(applied.message)
    stdout_console().print(Text(applied.message), soft_wrap=True)
