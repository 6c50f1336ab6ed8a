"""Enqueues that are events: debounced, or of a singleton key (docs/debounce.md).

Each such enqueue is an event and makes a task of its own, with an id of its
own (``BATCH/ITEMKEY~TOKEN``), unless the store settles otherwise: a debounced
event lands on the open task of its debounce key (``BATCH/ITEMKEY``, the id the
item would have in a plain enqueue), and a singleton event finds its key held
and is dropped or queued. The store decides, in one transaction
(``cairn.store.sqlgates``), so the answer is the same whichever process sends.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime, timedelta

from cairn.errors import ConfigurationError
from cairn.gates import OnConflict, check_on_conflict, check_singleton, window_ms
from cairn.names import check_name
from cairn.store import Store
from cairn.store.records import Gated, NewTask

__all__ = ["EventOptions", "event_options", "send_event"]


@dataclasses.dataclass(frozen=True, slots=True)
class EventOptions:
    """An enqueue's debounce window (ms) or singleton key, checked."""

    debounce_ms: int | None = None
    singleton: str | None = None
    on_conflict: OnConflict = "drop"


def event_options(
    debounce: float | timedelta | None, singleton: str | None, on_conflict: str
) -> EventOptions | None:
    """The checked options, or None for a plain enqueue."""
    choice = check_on_conflict(on_conflict)
    if debounce is not None and singleton is not None:
        raise ConfigurationError(
            "give debounce= or singleton=, not both: a debounced task already runs once "
            "per quiet window of its key"
        )
    if debounce is not None:
        return EventOptions(debounce_ms=window_ms(debounce))
    if singleton is not None:
        return EventOptions(singleton=check_singleton(singleton), on_conflict=choice)
    if choice != "drop":
        raise ConfigurationError("on_conflict= applies to singleton= tasks only; give a key")
    return None


def send_event(store: Store, task: NewTask, options: EventOptions, now: datetime) -> Gated:
    """Send ``task`` (whose id is what a plain enqueue would give it) as an event."""
    token = uuid.uuid4().hex[:12]
    event = dataclasses.replace(task, id=check_name("task id", f"{task.id}~{token}"))
    if options.debounce_ms is not None:
        due = now + timedelta(milliseconds=options.debounce_ms)
        return store.debounce(event, task.id, options.debounce_ms, due, now)
    assert options.singleton is not None  # event_options gives one or the other
    return store.enqueue_singleton(event, options.singleton, options.on_conflict == "queue", now)
