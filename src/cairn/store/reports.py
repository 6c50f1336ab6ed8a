"""What the admin side's reporting queries take and return, as small frozen
values: the window a metric covers, and the totals, spans and checkpoints read
over it (``cairn.store.admin``). The metrics themselves are computed from these
by ``cairn.observe.metrics``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Window:
    """Which tasks count: created in ``[since, until)``, of ``batch`` if given.

    Tasks cairn runs for itself (names starting ``cairn.``: stall alerts, daily
    reports) are left out of every count."""

    since: datetime | None = None
    until: datetime | None = None
    batch: str | None = None


@dataclass(frozen=True)
class TaskTotals:
    """Counts over the tasks of a window."""

    by_status: dict[str, int]
    interrupted: int
    interrupted_completed: int
    interruptions: int
    task_retries: int


@dataclass(frozen=True)
class BatchSpan:
    """One batch's first start and last finish, and how many tasks are unfinished."""

    name: str
    tasks: int
    unfinished: int
    first_started_at: datetime | None
    last_finished_at: datetime | None


@dataclass(frozen=True)
class StepTotals:
    """Counts over the step rows (kind 'step') of the window's tasks."""

    rows: int
    calls: int
    retries: int
    failed: int
    # Completed steps of interrupted tasks that took more than one call: see
    # docs/observability.md for why this is a suspicion, not a proof.
    suspect_reruns: int
    suspect_rerun_tasks: int


@dataclass(frozen=True)
class OpTotals:
    """Operation keys first claimed in the window, and their calls."""

    keys: int
    redundant_keys: int
    calls: int


@dataclass(frozen=True)
class StepInFlight:
    """The entry a running task's owner is running now: its position, its
    name, and when it began (noted by the owner's lease heartbeat, so it shows
    up to a third of a lease after the step began)."""

    seq: int
    name: str
    started_at: datetime


@dataclass(frozen=True)
class RunningTask:
    """A running task and the last moment it showed progress."""

    task_id: str
    batch: str | None
    name: str
    owner: str | None
    checkpoint: datetime
    last_step: str | None = None  # the name of its latest history entry, if any
    in_flight: StepInFlight | None = None  # the entry it is in now, if noted
    # Its item key, arguments (encoded) and codec: its key as given, in alerts.
    item_key: str | None = None
    args: str | None = None
    codec: str = "json"


@dataclass(frozen=True)
class StatusCount:
    """How many tasks of a batch have one status, and the last of them to finish."""

    status: str
    tasks: int
    last_finished_at: datetime | None


@dataclass(frozen=True)
class TaskQuery:
    """Which tasks a listing shows (``cairn tasks``, the dashboard's task pages).

    ``status``, ``batch`` and ``name`` match exactly; ``since <= created_at <
    until``; ``search`` matches any part of a task's id, of its name or of its
    error text, letter case ignored; ``error_type`` picks the tasks whose
    recorded error is of that type (a batch's failure group; ``unknown``: no
    error recorded). Tasks cairn runs for itself (names starting ``cairn.``:
    stall alerts, daily reports) are left out unless ``include_internal``."""

    status: str | None = None
    batch: str | None = None
    name: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    search: str | None = None
    include_internal: bool = False
    error_type: str | None = None
