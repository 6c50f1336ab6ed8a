"""``cairn retry``: move failed (or cancelled) tasks back to pending, budget reset."""

from __future__ import annotations

from typing import Annotated

import typer

from cairn.admin import RETRY

from ._actions import act_on_batch, act_on_task
from ._consoles import fail
from ._store_option import DEFAULT_URL, StoreOption, opened_store

_USAGE = "say which tasks: `cairn retry TASK` or `cairn retry --batch B --failed`"


def retry_command(
    task_id: Annotated[
        str | None, typer.Argument(metavar="[TASK]", help="The task id to retry.")
    ] = None,
    batch: Annotated[
        str | None, typer.Option("--batch", "-b", help="Retry tasks of this batch.")
    ] = None,
    failed: Annotated[
        bool, typer.Option("--failed", help="With --batch: its failed tasks.")
    ] = False,
    cancelled: Annotated[
        bool, typer.Option("--cancelled", help="With --batch: its cancelled tasks.")
    ] = False,
    store: StoreOption = DEFAULT_URL,
) -> None:
    """Move a failed or cancelled task back to pending with a fresh retry budget.

    The next `run_batch` (or `app.run`) of its batch runs it again; its finished
    steps are not run again.
    """
    sources = tuple(s for s, wanted in (("failed", failed), ("cancelled", cancelled)) if wanted)
    _check_usage(task_id, batch, sources)
    with opened_store(store) as opened:
        if task_id is not None:
            act_on_task(opened, RETRY, task_id)
        else:
            assert batch is not None  # _check_usage made sure
            act_on_batch(opened, RETRY, batch, sources)


def _check_usage(task_id: str | None, batch: str | None, sources: tuple[str, ...]) -> None:
    if task_id is not None and batch is not None:
        fail(f"give a TASK or --batch, not both; {_USAGE}")
    if task_id is None and batch is None:
        fail(_USAGE)
    if task_id is not None and sources:
        fail("--failed and --cancelled go with --batch; `cairn retry TASK` takes no flags")
    if batch is not None and not sources:
        fail(
            f"say which tasks of batch {batch} to retry: add --failed and/or --cancelled, "
            f"as in `cairn retry --batch {batch} --failed`"
        )
