"""The rows a store keeps, as small frozen values in storage terms.

Values (arguments, outputs, results) are already-encoded text here: the store
never interprets them, so no task logic leaks into storage.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

TaskStatus = Literal["pending", "running", "completed", "failed", "cancelled"]
TASK_STATUSES: tuple[TaskStatus, ...] = ("pending", "running", "completed", "failed", "cancelled")
FINISHED_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})

StepKind = Literal["step", "input", "sleep"]
StepStatus = Literal["completed", "retrying", "failed"]


@dataclass(frozen=True, slots=True)
class NewTask:
    """A task to create if its id is not taken yet."""

    id: str
    name: str
    args: str
    codec: str
    batch: str | None = None
    item_key: str | None = None


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """One task as stored."""

    id: str
    batch: str | None
    item_key: str | None
    name: str
    args: str
    codec: str
    status: TaskStatus
    attempts: int
    retry_base: int
    fence: int
    owner: str | None
    lease_expires_at: datetime | None
    result: str | None
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One entry of a task's history, at position ``seq``."""

    task_id: str
    seq: int
    kind: StepKind
    name: str
    status: StepStatus
    output: str | None
    attempts: int
    task_attempt: int
    run_attempts: int
    error: str | None
    retry_at: datetime | None
    started_at: datetime
    finished_at: datetime


@dataclass(frozen=True, slots=True)
class BatchSummary:
    """A batch with its task counts by status."""

    name: str
    task_name: str
    created_at: datetime
    counts: dict[str, int]
    first_started_at: datetime | None
    last_finished_at: datetime | None

    @property
    def total(self) -> int:
        return sum(self.counts.values())
