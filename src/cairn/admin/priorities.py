"""Changing the priority of tasks that have not run yet, as an operator action.

A pending or waiting task takes the new priority at once: the next claim reads
it. A running or finished task keeps its own (it is not claimed again before it
ends), and the sentence says so. Written to the audit trail like every action.
"""

from __future__ import annotations

from datetime import datetime

from cairn.admin.actions import Applied
from cairn.admin.audit import Actor, audit
from cairn.errors import ConfigurationError
from cairn.priority import check_priority
from cairn.store import AdminStore

__all__ = ["set_batch_priority", "set_priority"]


def set_priority(
    store: AdminStore, task_id: str, priority: int, now: datetime, *, actor: Actor | None = None
) -> Applied:
    """Give task ``task_id`` ``priority`` if it is pending or waiting, or say why not."""
    detail = {"priority": priority}
    with audit(store, actor, "priority", f"task {task_id}", now, detail) as entry:
        applied = _set_one(store, task_id, priority, now)
        entry.done(applied.count, applied.message)
    return applied


def set_batch_priority(
    store: AdminStore, batch: str, priority: int, now: datetime, *, actor: Actor | None = None
) -> Applied:
    """Give every pending or waiting task of ``batch`` ``priority``."""
    detail = {"priority": priority}
    changed = 0
    with audit(store, actor, "priority", f"batch {batch}", now, detail) as entry:
        try:
            check_priority(priority)
        except ConfigurationError as exc:
            applied = Applied(None, False, f"{exc}. Nothing changed.", refused=True)
        else:
            changed = store.set_batch_priority(batch, priority, now)
            applied = Applied(
                None,
                bool(changed),
                f"{changed} pending or waiting task(s) of batch {batch!r} now have "
                f"priority {priority}",
            )
        entry.done(changed, applied.message)
    return applied


def _set_one(store: AdminStore, task_id: str, priority: int, now: datetime) -> Applied:
    try:
        check_priority(priority)
    except ConfigurationError as exc:
        return Applied(None, False, f"{exc}. Nothing changed.", refused=True)
    task = store.get_task(task_id)
    if task is None:
        return Applied(None, False, f"no task {task_id!r} in this store. Nothing changed.")
    if store.set_priority(task_id, priority, now):
        return Applied(task, True, f"task {task_id}: priority {task.priority} -> {priority}")
    return Applied(
        task,
        False,
        f"task {task_id} is {task.status}; only a pending or waiting task's priority can "
        "change (a running one is not claimed again before it ends). Nothing changed.",
    )
