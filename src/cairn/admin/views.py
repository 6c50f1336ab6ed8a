"""One task as an operator sees it: arguments, result, error, every step with
its output, attempts, interruptions, children and conversations.

Values are shown, never run: a JSON-codec value is pretty-printed, a value in
the blob store is shown by its reference (size and sha256), and anything else
(a pickle, damaged text) stays raw text. Unpickling would run code from the store.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cairn.blobs.ref import is_ref, parse_ref
from cairn.errors import BlobCorrupt
from cairn.store import AdminStore
from cairn.store.records import ConversationSummary, StepRecord, TaskRecord
from cairn.store.reports import StepInFlight

__all__ = [
    "BlobInfo",
    "ErrorView",
    "StepView",
    "TaskView",
    "ValueView",
    "error_view",
    "parse_error",
    "task_view",
    "value_view",
]


def parse_error(text: str | None) -> dict[str, Any] | None:
    """A stored error (JSON ``{type, message, traceback}``) as a dict; text that
    is not such JSON becomes ``{"type": "?", "message": text}``."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if isinstance(value, dict):
        return value
    return {"type": "?", "message": text}


@dataclass(frozen=True, slots=True)
class ErrorView:
    """A recorded error: the exception's type name, its message, its traceback."""

    type: str
    message: str
    traceback: str | None


def error_view(text: str | None) -> ErrorView | None:
    """The error recorded as ``text``, or None if there is none."""
    error = parse_error(text)
    if error is None:
        return None
    trace = error.get("traceback")
    return ErrorView(
        str(error.get("type") or "?"),
        str(error.get("message") or ""),
        None if trace is None else str(trace),
    )


@dataclass(frozen=True, slots=True)
class BlobInfo:
    """A value kept in the blob store: where, how many bytes, its sha256."""

    ref: str
    size: int
    sha256: str


@dataclass(frozen=True, slots=True)
class ValueView:
    """A stored value for display: exactly one of ``json_text`` (pretty JSON),
    ``blob`` (a blob store reference) or ``raw`` (the stored text, undecoded)."""

    codec: str
    json_text: str | None = None
    blob: BlobInfo | None = None
    raw: str | None = None


def value_view(text: str | None, codec: str) -> ValueView | None:
    """``text``, stored with ``codec``, for display; None if nothing is stored."""
    if text is None:
        return None
    if is_ref(text):
        try:
            ref = parse_ref(text)
        except BlobCorrupt:
            return ValueView(codec, raw=text)
        return ValueView(codec, blob=BlobInfo(ref.uri, ref.size, ref.sha256))
    if codec == "json":
        try:
            value = json.loads(text)
        except ValueError:
            return ValueView(codec, raw=text)
        return ValueView(codec, json_text=json.dumps(value, indent=2, ensure_ascii=False))
    return ValueView(codec, raw=text)


@dataclass(frozen=True, slots=True)
class StepView:
    """One history entry; ``child_task_id`` is the task a ``spawn`` started."""

    seq: int
    kind: str
    name: str
    status: str
    attempts: int
    started_at: datetime
    finished_at: datetime
    output: ValueView | None
    error: ErrorView | None
    child_task_id: str | None = None
    # The task attempt that wrote it, the calls of this run, when a retry is due.
    task_attempt: int = 0
    run_attempts: int = 0
    retry_at: datetime | None = None
    # What produced it (docs/versions.md), and, if on_change='keep' replayed it
    # across a code change, the fingerprint of the code that kept it.
    fingerprint: str | None = None
    kept: str | None = None


@dataclass(frozen=True, slots=True)
class TaskView:
    """A task with everything recorded about it. ``attempts`` counts those since
    the last operator retry (``task.attempts`` counts all)."""

    task: TaskRecord
    arguments: ValueView | None
    result: ValueView | None
    error: ErrorView | None
    steps: list[StepView]
    interruptions: int
    attempts: int
    children: list[str]
    conversations: list[ConversationSummary]
    # The entry a running task is in now, as its heartbeat noted it.
    in_flight: StepInFlight | None = None
    # The budget a waiting task is parked on (cairn.budgets), or None.
    parked_on: str | None = None


def _spawned(step: StepRecord, codec: str) -> str | None:
    """The child id a completed spawn recorded, if its codec can be read safely."""
    if step.kind != "spawn" or step.output is None or codec != "json":
        return None
    try:
        value = json.loads(step.output)
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def _steps(steps: list[StepRecord], codec: str, children: list[str]) -> list[StepView]:
    # A spawn under another codec is matched to the children in order: each
    # spawn made its child before recording itself.
    unread = iter(children)
    views = []
    for step in steps:
        child = _spawned(step, codec)
        if step.kind == "spawn" and step.status == "completed" and child is None:
            child = next(unread, None)
        views.append(
            StepView(
                step.seq,
                step.kind,
                step.name,
                step.status,
                step.attempts,
                step.started_at,
                step.finished_at,
                value_view(step.output, codec),
                error_view(step.error),
                child,
                step.task_attempt,
                step.run_attempts,
                step.retry_at,
                step.fingerprint,
                step.kept,
            )
        )
    return views


def task_view(store: AdminStore, task_id: str) -> TaskView | None:
    """Everything recorded about ``task_id``, or None if there is no such task."""
    task = store.get_task(task_id)
    if task is None:
        return None
    history = [step for _, step in sorted(store.load_history(task_id).items())]
    children = store.child_ids(task_id)
    return TaskView(
        task=task,
        arguments=value_view(task.args, task.codec),
        result=value_view(task.result, task.codec),
        error=error_view(task.error),
        steps=_steps(history, task.codec, children),
        interruptions=task.interruptions,
        attempts=task.attempts - task.retry_base,
        children=children,
        conversations=store.conversation_summaries(task_id),
        in_flight=store.steps_in_flight([task_id]).get(task_id)
        if task.status == "running"
        else None,
        parked_on=store.budget_park(task_id) if task.status == "waiting" else None,
    )
