"""Operator actions on tasks (retry, cancel): on one task or on a batch, reported.

The actions and their rules are ``cairn.admin.actions``, which the dashboard
uses too; this module prints what came of them. Each change is one store call
that checks the status itself (of one task, or of a batch's tasks in one
status), so a task that moved meanwhile is left alone and not counted.
"""

from __future__ import annotations

from collections import Counter

from rich.text import Text

from cairn.admin.actions import Action, apply_to_task
from cairn.clock import SystemClock
from cairn.store import AdminStore

from ._consoles import fail, note, stdout_console
from ._store_option import require_batch
from .show import get_task_or_fail

# A batch action lists this many changed tasks by id, then only counts the rest.
_LISTED = 20


def act_on_task(store: AdminStore, action: Action, task_id: str) -> None:
    """Apply ``action`` to one task, or explain (exit 1) why nothing changed."""
    get_task_or_fail(store, task_id)  # an unknown id: exit 2, naming the store
    applied = apply_to_task(store, action, task_id, SystemClock().now())
    if not applied.changed:
        fail(applied.message, code=1)
    stdout_console().print(Text(applied.message), soft_wrap=True)


def act_on_batch(store: AdminStore, action: Action, batch: str, sources: tuple[str, ...]) -> None:
    """Apply ``action`` to every task of ``batch`` in one of ``sources``: one
    statement per source status, however many tasks the batch has."""
    require_batch(store, batch)
    console = stdout_console()
    counts: Counter[str] = Counter()
    stamp = SystemClock().now()
    seen: set[str] = set()
    for source in sources:
        # Each task once: a change run again after its answer was lost finds
        # every task moved at this stamp, an earlier status's among them.
        changed = [t for t in action.apply_to_batch(store, batch, source, stamp) if t not in seen]
        seen.update(changed)
        for task_id in changed[: max(0, _LISTED - sum(counts.values()))]:
            console.print(Text(action.describe(task_id, source)), soft_wrap=True)
        counts[source] += len(changed)
    _summarize(batch, action, sources, counts)


def _summarize(batch: str, action: Action, sources: tuple[str, ...], counts: Counter[str]) -> None:
    total = sum(counts.values())
    if total == 0:
        note(f"batch {batch}: no {' or '.join(sources)} tasks; nothing changed")
        return
    if total > _LISTED:
        stdout_console().print(f"... and {total - _LISTED} more")
    parts = ", ".join(f"{counts[s]} {s}" for s in sources if counts[s])
    stdout_console().print(
        Text(f"batch {batch}: {total} task(s) -> {action.target} ({parts})"), soft_wrap=True
    )
