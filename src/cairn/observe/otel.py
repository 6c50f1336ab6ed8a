"""OpenTelemetry spans for finished tasks and their steps, built after the fact.

``pip install 'cairn[otel]'``. cairn has no tracing hook in its engine, so this
reads what the store recorded (each task's first start and finish, each step's
start and finish of its last attempt) and emits one span per task with one
child span per history entry, with the recorded times. Attributes:
``cairn.task``, ``cairn.batch``, ``cairn.status``, ``cairn.attempts``,
``cairn.interruptions`` on tasks; ``cairn.step``, ``cairn.kind``,
``cairn.seq``, ``cairn.attempt`` (calls), ``cairn.status`` on steps.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from cairn.errors import ConfigurationError
from cairn.store.admin import admin
from cairn.store.protocol import Store
from cairn.store.records import StepRecord, TaskRecord
from cairn.store.sqlmetrics import INTERNAL_PREFIX


def _ns(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)


def _trace() -> Any:
    try:
        from opentelemetry import trace
    except ImportError as exc:
        raise ConfigurationError(
            "OpenTelemetry export needs opentelemetry-api/sdk: pip install 'cairn[otel]'"
        ) from exc
    return trace


def export_task(tracer: Any, task: TaskRecord, steps: Iterable[StepRecord]) -> bool:
    """Emit the spans of one finished task; False if it has no start or finish."""
    if task.started_at is None or task.finished_at is None:
        return False
    trace = _trace()
    span = tracer.start_span(
        f"task {task.name}",
        start_time=_ns(task.started_at),
        attributes={
            "cairn.task": task.id,
            "cairn.batch": task.batch or "",
            "cairn.status": task.status,
            "cairn.attempts": task.attempts,
            "cairn.interruptions": task.interruptions,
        },
    )
    if task.status == "failed":
        span.set_status(trace.Status(trace.StatusCode.ERROR, (task.error or "")[:200]))
    parent = trace.set_span_in_context(span)
    for step in sorted(steps, key=lambda s: s.seq):
        child = tracer.start_span(
            f"{step.kind} {step.name}",
            context=parent,
            start_time=_ns(step.started_at),
            attributes={
                "cairn.task": task.id,
                "cairn.step": step.name,
                "cairn.kind": step.kind,
                "cairn.seq": step.seq,
                "cairn.attempt": step.attempts,
                "cairn.status": step.status,
            },
        )
        if step.status == "failed":
            child.set_status(trace.Status(trace.StatusCode.ERROR, (step.error or "")[:200]))
        child.end(end_time=_ns(step.finished_at))
    span.end(end_time=_ns(task.finished_at))
    return True


def export_spans(
    store: Store,
    tracer_provider: Any = None,
    *,
    batch: str | None = None,
    since: datetime | None = None,
    include_internal: bool = False,
) -> int:
    """Emit spans for every finished task (of ``batch``, finished at or after
    ``since``) through ``tracer_provider`` (default: the global one). Returns
    how many tasks were exported. cairn's own tasks (names starting ``cairn.``:
    alerts, reports) are left out unless ``include_internal``."""
    tracer = _trace().get_tracer("cairn", tracer_provider=tracer_provider)
    listing = admin(store, "the OpenTelemetry export")
    exported = 0
    for status in ("completed", "failed", "cancelled"):
        for task in listing.list_tasks(batch=batch, status=status):
            if since is not None and (task.finished_at is None or task.finished_at < since):
                continue
            if task.name.startswith(INTERNAL_PREFIX) and not include_internal:
                continue
            exported += export_task(tracer, task, store.load_history(task.id).values())
    return exported
