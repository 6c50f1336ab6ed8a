"""Operator actions on tasks (retry, cancel): on one task or on a batch, reported.

The actions and their rules are ``cairn.admin.actions``, which the dashboard
uses too; this module prints what came of them. Each change is one store call
that checks the status itself (of one task, or of a batch's tasks in one
status), so a task that moved meanwhile is left alone and not counted. Each is
written to the audit trail as ``cli:USER`` (``cairn audit``).
"""

from __future__ import annotations

from rich.text import Text

from cairn.admin.actions import Action, apply_to_batch, apply_to_task
from cairn.clock import SystemClock
from cairn.store import AdminStore

from ._actor import cli_actor
from ._consoles import fail, note, stdout_console
from ._store_option import require_batch
from .show import get_task_or_fail

# A batch action lists this many changed tasks by id, then only counts the rest.
_LISTED = 20


def act_on_task(
    store: AdminStore, action: Action, task_id: str, *, keep_children: bool = False
) -> None:
    """Apply ``action`` to one task, or explain (exit 1) why nothing changed."""
    get_task_or_fail(store, task_id)  # an unknown id: exit 2, naming the store
    applied = apply_to_task(
        store, action, task_id, SystemClock().now(), actor=cli_actor(), keep_children=keep_children
    )
    if not applied.changed:
        fail(applied.message, code=1)
    console = stdout_console()
    console.print(Text(applied.message), soft_wrap=True)
    for child in applied.children[:_LISTED]:
        console.print(Text(f"task {child}: -> cancelled (spawned by {task_id})"), soft_wrap=True)
    if len(applied.children) > _LISTED:
        console.print(f"... and {len(applied.children) - _LISTED} more")


def act_on_batch(store: AdminStore, action: Action, batch: str, sources: tuple[str, ...]) -> None:
    """Apply ``action`` to every task of ``batch`` in one of ``sources``: one
    statement per source status, however many tasks the batch has."""
    require_batch(store, batch)
    applied = apply_to_batch(store, action, batch, sources, SystemClock().now(), actor=cli_actor())
    if applied.count == 0:
        note(applied.summary())
        return
    console = stdout_console()
    listed = 0
    for source, ids in applied.changed.items():
        for task_id in ids[: max(0, _LISTED - listed)]:
            console.print(Text(action.describe(task_id, source)), soft_wrap=True)
        listed += min(len(ids), max(0, _LISTED - listed))
    if applied.count > _LISTED:
        console.print(f"... and {applied.count - _LISTED} more")
    console.print(Text(applied.summary()), soft_wrap=True)
