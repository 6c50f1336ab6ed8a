"""OpenTelemetry spans for finished tasks and their steps, built after the fact.

``pip install 'cairn-durable[otel]'``. For tasks that ran without live tracing
(``cairn.observe.live``), this reads what the store recorded (each task's first
start and finish, each step's start and finish of its last attempt) and emits
the same tree the live spans make: a span per batch (its tasks' first start to
last finish), one per task under it, one per history entry under that. Names
are templates (``task etl``, ``step fetch-*``); attributes: ``cairn.task``,
``cairn.batch``, ``cairn.status``, ``cairn.attempts``, ``cairn.interruptions``
on tasks; ``cairn.step``, ``cairn.kind``, ``cairn.seq``, ``cairn.call``
(calls), ``cairn.status`` on steps.

Through a provider from ``provider_for`` the ids are those of the live spans
(``cairn.observe.spanids``): exporting a batch that was traced live, or
exporting twice, gives a collector the same spans again, not new ones.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from cairn.errors import ConfigurationError
from cairn.observe.metrics import family_of
from cairn.observe.templates import step_template
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
            "OpenTelemetry export needs opentelemetry-api/sdk: pip install 'cairn-durable[otel]'"
        ) from exc
    return trace


def provider_for(exporter: Any, service: str | None = None) -> Any:
    """A tracer provider with derived ids, ``service.name`` (default
    ``OTEL_SERVICE_NAME`` or ``cairn``) and a batch span processor on
    ``exporter``, which is handed every span redacted
    (``cairn.observe.span_redaction``)."""
    _trace()
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from cairn.observe.span_redaction import RedactingExporter
    from cairn.observe.spanids import DerivedIds

    name = service or os.environ.get("OTEL_SERVICE_NAME") or "cairn"
    resource = Resource.create({"service.name": name})
    provider = TracerProvider(resource=resource, id_generator=DerivedIds())
    provider.add_span_processor(BatchSpanProcessor(RedactingExporter(exporter)))
    return provider


class _Spans:
    """Starts spans with the derived ids when the provider hands them out."""

    def __init__(self, tracer_provider: Any) -> None:
        from cairn.observe.spanids import DerivedIds

        trace = _trace()
        self.trace = trace
        self.tracer = trace.get_tracer("cairn", tracer_provider=tracer_provider)
        found = getattr(tracer_provider, "id_generator", None)
        self.ids = found if isinstance(found, DerivedIds) else None

    def start(
        self,
        name: str,
        ids: tuple[int, int, int | None],
        start: datetime,
        attributes: Any,
        parent_span: Any = None,
    ) -> Any:
        """Start a span with ``ids``; through a provider of random ids, under
        ``parent_span`` (the object) instead."""
        from cairn.observe.spanids import parent_context

        trace_id, span_id, parent = ids
        if self.ids is None:
            context = None if parent_span is None else self.trace.set_span_in_context(parent_span)
            return self.tracer.start_span(
                name, context=context, start_time=_ns(start), attributes=attributes
            )
        context = None if parent is None else parent_context(trace_id, parent)
        with self.ids.next(trace_id, span_id):
            return self.tracer.start_span(
                name, context=context, start_time=_ns(start), attributes=attributes
            )

    def failed(self, span: Any, error: str | None) -> None:
        span.set_status(self.trace.Status(self.trace.StatusCode.ERROR, (error or "")[:200]))


def export_task(
    spans: _Spans,
    task: TaskRecord,
    steps: Iterable[StepRecord],
    *,
    root: str | None = None,
    parent_fence: int = 0,
) -> bool:
    """Emit the spans of one finished task; False if it has no start or finish.
    ``root`` is the top of its spawn chain, ``parent_fence`` its parent's fence
    (a spawned child's span sits under its parent's last run)."""
    from cairn.observe.spanids import call_span, task_span

    if task.started_at is None or task.finished_at is None:
        return False
    top = root or task.id
    trace_id, span_id, parent = task_span(task.id, task.fence, task.batch, top)
    if task.parent_id is not None:
        parent = task_span(task.parent_id, parent_fence, task.batch, top)[1]
    attributes = {
        "cairn.task": task.id,
        "cairn.task.name": task.name,
        "cairn.batch": task.batch or "",
        "cairn.status": task.status,
        "cairn.attempts": task.attempts,
        "cairn.interruptions": task.interruptions,
    }
    span = spans.start(
        f"task {task.name}", (trace_id, span_id, parent), task.started_at, attributes
    )
    if task.status == "failed":
        spans.failed(span, task.error)
    for step in sorted(steps, key=lambda s: s.seq):
        attributes = {
            "cairn.task": task.id,
            "cairn.step": step.name,
            "cairn.kind": step.kind,
            "cairn.seq": step.seq,
            "cairn.call": step.attempts,
            "cairn.status": step.status,
        }
        name = f"{step.kind} {step_template(step.name)}"
        if step.kind == "llm":
            name = _model_call(attributes, step.output)
        ids = (trace_id, call_span(task.id, step.seq, step.attempts), span_id)
        child = spans.start(name, ids, step.started_at, attributes, span)
        if step.status == "failed":
            spans.failed(child, step.error)
        child.end(end_time=_ns(step.finished_at))
    span.end(end_time=_ns(task.finished_at))
    return True


def _model_call(attributes: dict[str, Any], output: str | None) -> str:
    """A model call's span name and GenAI attributes, from its recorded reply."""
    try:
        reply = json.loads(output or "null")
    except ValueError:
        reply = None
    attributes["gen_ai.operation.name"] = "chat"
    if not isinstance(reply, dict) or not reply.get("model"):
        return "chat"
    model = str(reply["model"])
    attributes["gen_ai.request.model"] = attributes["gen_ai.response.model"] = model
    attributes["gen_ai.system"] = str(reply.get("provider") or "")
    usage = reply.get("usage") or {}
    for key in ("input_tokens", "output_tokens"):
        if isinstance(usage.get(key), int):
            attributes[f"gen_ai.usage.{key}"] = usage[key]
    return f"chat {model}"


def _export_batches(spans: _Spans, tasks: list[TaskRecord]) -> None:
    """A span per batch, from its exported tasks' first start to last finish."""
    from cairn.observe.spanids import batch_span

    for batch in sorted({t.batch for t in tasks if t.batch is not None}):
        mine = [t for t in tasks if t.batch == batch and t.started_at and t.finished_at]
        if not mine:
            continue
        trace_id, span_id = batch_span(batch)
        start = min(t.started_at for t in mine if t.started_at)
        span = spans.start(
            f"batch {step_template(family_of(batch))}",
            (trace_id, span_id, None),
            start,
            {"cairn.batch": batch},
        )
        span.end(end_time=_ns(max(t.finished_at for t in mine if t.finished_at)))


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
    spans = _Spans(tracer_provider)
    listing = admin(store, "the OpenTelemetry export")
    chosen: list[TaskRecord] = []
    for status in ("completed", "failed", "cancelled"):
        for task in listing.list_tasks(batch=batch, status=status):
            if since is not None and (task.finished_at is None or task.finished_at < since):
                continue
            if task.name.startswith(INTERNAL_PREFIX) and not include_internal:
                continue
            chosen.append(task)
    _export_batches(spans, chosen)
    exported = 0
    for task in chosen:
        root, parent_fence = _lineage(store, task)
        history = store.load_history(task.id).values()
        exported += export_task(spans, task, history, root=root, parent_fence=parent_fence)
    return exported


def _lineage(store: Store, task: TaskRecord) -> tuple[str, int]:
    """The top of ``task``'s spawn chain, and its parent's fence (0: none)."""
    if task.parent_id is None:
        return task.id, 0
    parent = store.get_task(task.parent_id)
    fence = parent.fence if parent is not None else 0
    root = task.parent_id
    while parent is not None and parent.parent_id is not None:
        root = parent.parent_id
        parent = store.get_task(parent.parent_id)
    return root, fence
