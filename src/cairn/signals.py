"""Sending a signal to a task (``Cairn.signal``, ``cairn signal``).

A signal is recorded once per (task, name); the first one stands. It wakes the
task if the task is waiting, and a task that reaches ``ctx.wait_for(name)``
later finds it there. Payloads are JSON (through cairn's JSON codec, so
datetimes, decimals and the like keep their types), whatever the app's codec,
so the CLI can send them too.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cairn.codec import JsonCodec
from cairn.errors import TaskError, UnknownTask
from cairn.names import check_name
from cairn.store.protocol import Store

SIGNAL_CODEC = JsonCodec()


def send_signal(store: Store, task_id: str, name: str, payload: Any, now: datetime) -> bool:
    """Record signal ``name`` for ``task_id`` and wake it. False if that signal
    was sent before. ``UnknownTask`` or ``TaskError`` if no task can take it."""
    if not name:
        raise ValueError("a signal needs a name, e.g. 'approval'")
    check_name("signal name", name)
    record = store.get_task(check_name("task id", task_id))
    if record is None:
        raise UnknownTask(f"no task {task_id!r} in {store.url}", task_id=task_id)
    if record.status in ("completed", "failed", "cancelled"):
        raise TaskError(
            f"task {task_id!r} is {record.status}; it waits for no signal. "
            "`cairn retry` it first if it should run again.",
            task_id=task_id,
        )
    encoded = SIGNAL_CODEC.encode(payload)
    return store.send_signal(task_id, name, encoded, SIGNAL_CODEC.name, now)
