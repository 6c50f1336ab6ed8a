"""Sending a signal to a task, as an operator action with the CLI's sentences.

It stands on ``cairn.signals.send_signal``: the first signal of a name stands,
and a waiting task is woken.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cairn.admin.actions import Applied
from cairn.admin.audit import Actor, audit
from cairn.errors import CairnError
from cairn.signals import send_signal as record_signal
from cairn.store import AdminStore

__all__ = ["send_signal"]


def send_signal(
    store: AdminStore,
    task_id: str,
    name: str,
    payload: Any,
    now: datetime,
    *,
    actor: Actor | None = None,
) -> Applied:
    """Send signal ``name`` with the JSON-able ``payload`` to ``task_id``,
    written to the audit trail as ``actor`` (the name, not the payload).

    ``changed`` False and ``refused`` False: that signal had been sent before.
    ``refused``: no such task, a finished one, or a bad name; nothing changed."""
    with audit(store, actor, "signal", f"task {task_id}", now, {"signal": name}) as entry:
        applied = _send(store, task_id, name, payload, now)
        entry.done(applied.count, applied.message)
    return applied


def _send(store: AdminStore, task_id: str, name: str, payload: Any, now: datetime) -> Applied:
    try:
        task = store.get_task(task_id)
        sent = record_signal(store, task_id, name, payload, now)
    except (CairnError, ValueError) as exc:
        return Applied(None, False, f"{str(exc).rstrip('.')}. Nothing changed.", refused=True)
    if sent:
        return Applied(task, True, f"sent {name!r} to task {task_id}")
    return Applied(
        task, False, f"task {task_id} already had a {name!r} signal; the first one stands"
    )
