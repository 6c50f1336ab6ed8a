"""What a task logged (the ``logging`` module) while it ran, as ``cairn logs``
and the task page show it: the records it kept (``cairn.engine.tasklogs``:
bounded per task, redacted) and how many it did not keep."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cairn.engine.tasklogs import MAX_BYTES, MAX_LINES
from cairn.store import AdminStore

__all__ = ["LogLine", "TaskLogView", "task_logs"]


@dataclass(frozen=True, slots=True)
class LogLine:
    """One record a task logged: when (ISO 8601, UTC), in which attempt, its
    level, its logger's name and its message (redacted)."""

    at: str
    attempt: int
    level: str
    logger: str
    message: str


@dataclass(frozen=True, slots=True)
class TaskLogView:
    """A task's kept records, oldest first, and how many it did not keep (past
    ``MAX_LINES`` records or ``MAX_BYTES`` of them)."""

    lines: list[LogLine]
    dropped: int

    @property
    def bound(self) -> str:
        """The bound, in words, for the line that says records were not kept."""
        return f"a task keeps at most {MAX_LINES} records and {MAX_BYTES // 1024} KiB of them"


def _line(raw: dict[str, Any]) -> LogLine:
    attempt = raw.get("attempt")
    return LogLine(
        str(raw.get("at", "")),
        attempt if isinstance(attempt, int) else 0,
        str(raw.get("level", "")),
        str(raw.get("logger", "")),
        str(raw.get("message", "")),
    )


def task_logs(store: AdminStore, task_id: str) -> TaskLogView:
    """What ``task_id`` logged and kept (no records: an empty view)."""
    found = store.task_log(task_id)
    if found is None:
        return TaskLogView([], 0)
    lines, dropped = found
    return TaskLogView([_line(raw) for raw in lines], dropped)
