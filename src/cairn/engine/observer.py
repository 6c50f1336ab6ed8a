"""The observer hook: what the engine tells an onlooker as work happens.

An app's ``observer`` (``Cairn.observer``; ``no_observer`` unless set) is called
with an ``Event`` at the boundaries the fault hooks mark: a batch starting and
ending, a task run starting and ending, each call of a step or model call
starting, returning, and failing, and each live piece of a streamed model
call's text. Live tracing (``cairn.observe.live``) and the token lane
(``cairn.observe.lane``) are built on it. It watches; it cannot change what
happens: whatever it raises is logged and swallowed, and with ``no_observer``
no event is even built.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

log = logging.getLogger("cairn")


@dataclass(frozen=True, slots=True)
class Event:
    """One boundary. ``point`` is one of ``batch_started``, ``batch_ended``,
    ``task_started``, ``task_ended``, ``call_started``, ``call_returned``,
    ``call_failed``, ``call_chunk`` (a live piece of a streamed model call's
    text, in ``value``: cairn.observe.lane); the fields that do not apply to it
    are left empty."""

    point: str
    at: datetime
    batch: str | None = None
    task_id: str | None = None
    # The task's function name; on task_started, the task that spawned it.
    task_name: str | None = None
    parent_id: str | None = None
    # The claim's fence: it grows at every claim, so it tells runs of a task apart.
    fence: int = 0
    # A call: its position in the history, kind (step, llm, ...), name, and number
    # (1 for the first call of that entry, counted across restarts).
    seq: int = -1
    kind: str | None = None
    name: str | None = None
    call: int = 0
    # task_ended: the outcome (completed, failed, cancelled, lost, waiting);
    # call_failed: retrying or failed.
    status: str | None = None
    # call_returned: what the call returned (a model call's reply metadata).
    value: Any = None
    error: BaseException | None = None


Observer = Callable[[Event], None]


def no_observer(event: Event) -> None:
    """The default observer: does nothing (and the engine skips building events)."""


def tell(observer: Observer, point: str, clock: Callable[[], datetime], **fields: Any) -> None:
    """Build the event and hand it over, unless there is no observer."""
    if observer is not no_observer:
        notify(observer, Event(point, clock(), **fields))


def notify(observer: Observer, event: Event) -> None:
    """Hand ``event`` to ``observer``; what it raises is logged, never passed on."""
    try:
        observer(event)
    except Exception:
        log.warning("cairn: the observer failed on %s; ignored", event.point, exc_info=True)
