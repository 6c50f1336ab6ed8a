"""``cairn cancel``: cancel pending or running tasks."""

from __future__ import annotations

from typing import Annotated

import typer

from cairn.admin import CANCEL

from ._actions import act_on_batch, act_on_task
from ._consoles import fail
from ._store_option import DEFAULT_URL, StoreOption, opened_store


def cancel_command(
    task_id: Annotated[
        str | None, typer.Argument(metavar="[TASK]", help="The task id to cancel.")
    ] = None,
    batch: Annotated[
        str | None,
        typer.Option("--batch", "-b", help="Cancel every pending or running task of this batch."),
    ] = None,
    keep_children: Annotated[
        bool,
        typer.Option(
            "--keep-children", help="Cancel only TASK, not the tasks it spawned (ctx.spawn)."
        ),
    ] = False,
    store: StoreOption = DEFAULT_URL,
) -> None:
    """Cancel a pending, running or waiting task, or every unfinished task of a batch.

    Cancelling a task also cancels the unfinished tasks it spawned (and theirs),
    in the same transaction, unless --keep-children. A running task's process
    notices at its next step boundary and stops there. `cairn retry` brings a
    cancelled task back.
    """
    if (task_id is None) == (batch is None):
        fail("say which tasks: `cairn cancel TASK` or `cairn cancel --batch B`")
    if keep_children and task_id is None:
        fail("--keep-children goes with `cairn cancel TASK`; a batch's children are in the batch")
    with opened_store(store) as opened:
        if task_id is not None:
            act_on_task(opened, CANCEL, task_id, keep_children=keep_children)
        else:
            assert batch is not None  # checked above
            act_on_batch(opened, CANCEL, batch, CANCEL.sources)
