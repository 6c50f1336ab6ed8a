"""Triage at a glance: what the task list shows of each task beyond its row
(how long it ran, the step it is in or failed in, its error's type and first
line), and the failed tasks of a filter grouped by error type.

Each page reads a bounded amount: the rows of one page, then one look for the
steps in flight of its running tasks and one for the failing steps of its
failed ones; the groups are counted by the store (``AdminStore.error_groups``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from cairn.admin.views import error_view
from cairn.observe.text import first_line, readable_key
from cairn.store import AdminStore
from cairn.store.records import TaskRecord
from cairn.store.reports import StepInFlight, TaskQuery

__all__ = ["ErrorGroup", "TriageRow", "error_groups", "triage_rows"]

# A listing shows at most this many error groups (the rest are counted).
GROUPS = 20


@dataclass(frozen=True, slots=True)
class TriageRow:
    """A task as the triage list shows it: ``seconds`` it ran (so far, if
    running); the step in flight or the step it failed in; its error's type and
    the first line of its message."""

    task: TaskRecord
    # The item key as given (``cairn.observe.text.readable_key``), or None.
    key: str | None
    seconds: float | None
    in_flight: StepInFlight | None
    failed_step: str | None
    error_type: str | None
    error_line: str | None


@dataclass(frozen=True, slots=True)
class ErrorGroup:
    """The failed tasks of a filter with one error type (``unknown``: none
    recorded), and how many."""

    error_type: str
    count: int


def _seconds(task: TaskRecord, now: datetime) -> float | None:
    if task.started_at is None:
        return None
    end = task.finished_at or (now if task.status == "running" else None)
    return None if end is None else max(0.0, (end - task.started_at).total_seconds())


def triage_rows(store: AdminStore, tasks: list[TaskRecord], now: datetime) -> list[TriageRow]:
    """``tasks`` (one page) with what triage needs of each: two looks in all."""
    running = [t.id for t in tasks if t.status == "running"]
    failed = [t.id for t in tasks if t.status == "failed"]
    flying = store.steps_in_flight(running) if running else {}
    failing = store.failed_steps(failed) if failed else {}
    rows = []
    for task in tasks:
        error = error_view(task.error) if task.status == "failed" else None
        rows.append(
            TriageRow(
                task=task,
                key=readable_key(task.item_key, task.args, task.codec),
                seconds=_seconds(task, now),
                in_flight=flying.get(task.id),
                failed_step=failing.get(task.id),
                error_type=None if error is None else error.type,
                error_line=None if error is None else first_line(error.message),
            )
        )
    return rows


def error_groups(store: AdminStore, query: TaskQuery, limit: int = GROUPS) -> list[ErrorGroup]:
    """The failed tasks ``query`` picks, by error type, most first; each type is
    also a filter (``TaskQuery.error_type``)."""
    return [ErrorGroup(kind, n) for kind, n in store.error_groups(query, limit)]
