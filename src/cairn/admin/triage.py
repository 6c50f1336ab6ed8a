"""Triage at a glance: what the task list shows of each task beyond its row
(how long it ran, the step it is in or failed in, its error's type and first
line), and the failed tasks of a filter grouped by error type.

Each page reads a bounded amount: the rows of one page, then one look for the
steps in flight of its running tasks and one for the failing steps of its
failed ones; the groups are counted by the store (``AdminStore.error_groups``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from cairn.admin.views import error_view
from cairn.observe.text import readable_key
from cairn.store import AdminStore
from cairn.store.records import TaskRecord
from cairn.store.reports import StepInFlight, TaskQuery
from cairn.store.sqlviews import UNKNOWN_ERROR

__all__ = ["ErrorGroup", "TriageRow", "error_groups", "first_line", "short_type", "triage_rows"]

# A listing shows at most this many error groups (the rest are counted).
GROUPS = 20
# The first line of an error, as a row shows it, in characters.
FIRST_LINE = 160


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


def short_type(error_type: str) -> str:
    """An error type as people read it: ``ValueError`` for ``builtins.ValueError``."""
    return error_type.removeprefix("builtins.")


def first_line(message: str, limit: int = FIRST_LINE) -> str:
    """The first non-blank line of ``message``, cut to ``limit`` characters."""
    line = next((part.strip() for part in message.splitlines() if part.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


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


def _type_of(head: str | None) -> str:
    """The error type of an ``error_groups`` head (``{"type": "X"``)."""
    if head is None:
        return UNKNOWN_ERROR
    try:
        value = json.loads(head + "}")
    except ValueError:
        return UNKNOWN_ERROR
    kind = value.get("type") if isinstance(value, dict) else None
    return kind if isinstance(kind, str) and kind else UNKNOWN_ERROR


def error_groups(store: AdminStore, query: TaskQuery, limit: int = GROUPS) -> list[ErrorGroup]:
    """The failed tasks ``query`` picks, by error type, most first; each type is
    also a filter (``TaskQuery.error_type``)."""
    counts: dict[str, int] = {}
    for head, count in store.error_groups(query, limit):
        kind = _type_of(head)
        counts[kind] = counts.get(kind, 0) + count
    return [
        ErrorGroup(kind, n) for kind, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
