"""Live OpenTelemetry spans, from the engine's observer hook as the work happens.

``pip install 'cairn-durable[otel]'``, then ``provider = trace_live(app)`` (OTLP/HTTP to
``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``endpoint=``; or any ``exporter=``). Spans go
through a batch span processor (many spans a request); ``provider.shutdown()``
at exit sends the rest. The tree, one trace per batch:

    batch <family>                 cairn.batch
      task <function>              cairn.task, cairn.batch, cairn.fence, cairn.status
        step <name template>       cairn.step, cairn.kind, cairn.seq, cairn.call
        chat <model>               a model call: gen_ai.* attributes
        task <child function>      a spawned child: child of its parent's span, linked

Span names are templates (``step fetch-*``, never ``step fetch-17``); ids and
names of this run are attributes. Ids are derived from what the store records
(``cairn.observe.spanids``), not drawn at random: a task resumed in another
process continues the same trace, and ``cairn otel-export`` after the fact
gives the same ids, so nothing is duplicated. ``service.name`` is the app's
name (``service=``; default the ``OTEL_SERVICE_NAME`` or ``cairn``).
"""

from __future__ import annotations

import logging
import threading
import traceback
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cairn.engine.observer import Event
from cairn.errors import ConfigurationError
from cairn.observe.metrics import family_of
from cairn.observe.otel import provider_for
from cairn.observe.templates import step_template
from cairn.redaction import redact
from cairn.store.sqlmetrics import INTERNAL_PREFIX

try:
    from cairn.observe.spanids import DerivedIds, batch_span, call_span, parent_context, task_span
except ImportError as exc:  # the otel extra is not installed
    raise ConfigurationError(
        "live tracing needs OpenTelemetry: pip install 'cairn-durable[otel]'"
    ) from exc

if TYPE_CHECKING:
    from cairn.app import Cairn

log = logging.getLogger("cairn.observe")


def _ns(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)


def trace_live(
    app: Cairn,
    *,
    exporter: Any = None,
    endpoint: str | None = None,
    service: str | None = None,
    include_internal: bool = False,
) -> Any:
    """Send ``app``'s spans live; returns the tracer provider (shut it down at exit).
    cairn's own tasks (names starting ``cairn.``: alerts, reports) make no spans
    unless ``include_internal``."""
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=endpoint)
    provider = provider_for(exporter, service)
    ids = provider.id_generator
    app.observer = LiveSpans(provider, ids, app, include_internal=include_internal)
    return provider


class LiveSpans:
    """An engine observer that opens a span at each start and ends it at each end."""

    def __init__(
        self, provider: Any, ids: DerivedIds, app: Cairn, *, include_internal: bool = False
    ) -> None:
        from opentelemetry import trace

        self._trace = trace
        self.tracer = provider.get_tracer("cairn")
        self.ids = ids
        self.app = app
        self.open: dict[tuple[Any, ...], Any] = {}
        # Each running task's (trace id, span id), for its calls' spans.
        self.tasks: dict[str, tuple[int, int]] = {}
        self.include_internal = include_internal
        # cairn's own tasks running now, left out.
        self.internal: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        if self._left_out(event):
            return
        handler = getattr(self, f"_{event.point}", None)
        if handler is not None:
            handler(event)

    def _left_out(self, event: Event) -> bool:
        """Whether ``event`` is of one of cairn's own tasks, not traced."""
        if self.include_internal or event.task_id is None:
            return False
        with self._lock:
            if event.point == "task_started" and (event.task_name or "").startswith(
                INTERNAL_PREFIX
            ):
                self.internal.add(event.task_id)
            left_out = event.task_id in self.internal
            if event.point == "task_ended":
                self.internal.discard(event.task_id)
        return left_out

    # -- opening and closing -----------------------------------------------------------
    def _start(
        self, key: tuple[Any, ...], name: str, ids: tuple[int, int, int | None], event: Event,
        attributes: dict[str, Any], links: list[Any] | None = None,
    ) -> None:  # fmt: skip
        trace_id, span_id, parent_id = ids
        context = None if parent_id is None else parent_context(trace_id, parent_id)
        with self.ids.next(trace_id, span_id):
            span = self.tracer.start_span(
                name, context=context, start_time=_ns(event.at), attributes=attributes, links=links
            )
        with self._lock:
            self.open[key] = span

    def _end(self, key: tuple[Any, ...], event: Event, error: str | None = None) -> Any:
        with self._lock:
            span = self.open.pop(key, None)
        if span is None:
            return None
        if error is not None:
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, error[:200]))
        span.end(end_time=_ns(event.at))
        return span

    # -- the events --------------------------------------------------------------------
    def _batch_started(self, event: Event) -> None:
        batch = event.batch or ""
        trace_id, span_id = batch_span(batch)
        name = f"batch {step_template(family_of(batch))}"
        self._start(
            ("batch", batch), name, (trace_id, span_id, None), event, {"cairn.batch": batch}
        )

    def _batch_ended(self, event: Event) -> None:
        self._end(("batch", event.batch or ""), event)

    def _task_started(self, event: Event) -> None:
        task_id = event.task_id or ""
        root = self._root_of(event)
        trace_id, span_id, parent = task_span(task_id, event.fence, event.batch, root)
        links = []
        if event.parent_id is not None:
            record = self.app.store.get_task(event.parent_id)
            fence = record.fence if record is not None else 0
            parent = task_span(event.parent_id, fence, event.batch, root)[1]
            links.append(self._link(trace_id, parent, "spawned by"))
        attributes = {
            "cairn.task": task_id,
            "cairn.task.name": event.task_name or "",
            "cairn.batch": event.batch or "",
            "cairn.fence": event.fence,
        }
        if event.parent_id is not None:
            attributes["cairn.parent"] = event.parent_id
        name = f"task {event.task_name}"
        with self._lock:
            self.tasks[task_id] = (trace_id, span_id)
        self._start(("task", task_id), name, (trace_id, span_id, parent), event, attributes, links)

    def _root_of(self, event: Event) -> str:
        """The task at the top of ``event``'s spawn chain (the trace of a task
        outside any batch is its root's)."""
        root = event.task_id or ""
        parent = event.parent_id
        while parent is not None and event.batch is None:
            root = parent
            record = self.app.store.get_task(parent)
            parent = None if record is None else record.parent_id
        return root

    def _link(self, trace_id: int, span_id: int, why: str) -> Any:
        context = parent_context(trace_id, span_id)
        span_context = self._trace.get_current_span(context).get_span_context()
        return self._trace.Link(span_context, {"cairn.link": why})

    def _task_ended(self, event: Event) -> None:
        span = self._peek(("task", event.task_id))
        if span is not None:
            span.set_attribute("cairn.status", event.status or "")
        error = str(event.error) if event.status == "failed" else None
        with self._lock:
            self.tasks.pop(event.task_id or "", None)
        self._end(("task", event.task_id), event, error)

    def _peek(self, key: tuple[Any, ...]) -> Any:
        with self._lock:
            return self.open.get(key)

    def _call_started(self, event: Event) -> None:
        task_id = event.task_id or ""
        with self._lock:
            known = self.tasks.get(task_id)
        trace_id, task_id_span = known or task_span(task_id, event.fence, event.batch, task_id)[:2]
        span_id = call_span(task_id, event.seq, event.call)
        kind, name = event.kind or "step", event.name or ""
        attributes: dict[str, Any] = {
            "cairn.task": task_id,
            "cairn.step": name,
            "cairn.kind": kind,
            "cairn.seq": event.seq,
            "cairn.call": event.call,
        }
        if kind == "llm":
            attributes["gen_ai.operation.name"] = "chat"
        span_name = f"{kind} {step_template(name)}"
        key = ("call", task_id, event.seq)
        self._start(key, span_name, (trace_id, span_id, task_id_span), event, attributes)

    def _call_returned(self, event: Event) -> None:
        key = ("call", event.task_id, event.seq)
        span = self._peek(key)
        if span is not None:
            span.set_attribute("cairn.status", "completed")
            if event.kind == "llm" and isinstance(event.value, dict):
                _gen_ai(span, event.value)
        self._end(key, event)

    def _call_failed(self, event: Event) -> None:
        key = ("call", event.task_id, event.seq)
        span = self._peek(key)
        if span is not None:
            span.set_attribute("cairn.status", event.status or "failed")
            if event.error is not None:
                # Its text as cairn records it: redacted (the exporter redacts
                # again, for spans of other libraries).
                span.add_event("exception", exception_attributes(event.error))
        self._end(key, event, redact(f"{type(event.error).__name__}: {event.error}"))


def exception_attributes(error: BaseException) -> dict[str, str]:
    """The attributes of an ``exception`` span event for ``error`` (the
    semantic conventions' names, as ``Span.record_exception`` writes them),
    redacted."""
    kind = type(error)
    return {
        "exception.type": f"{kind.__module__}.{kind.__qualname__}",
        "exception.message": redact(str(error)),
        "exception.stacktrace": redact("".join(traceback.format_exception(error))),
    }


def _gen_ai(span: Any, reply: dict[str, Any]) -> None:
    """The GenAI semantic-convention attributes of a model call, from its reply."""
    model = str(reply.get("model") or "")
    usage = reply.get("usage") or {}
    span.update_name(f"chat {model}" if model else "chat")
    span.set_attribute("gen_ai.system", str(reply.get("provider") or ""))
    span.set_attribute("gen_ai.request.model", model)
    span.set_attribute("gen_ai.response.model", model)
    for key in ("input_tokens", "output_tokens"):
        if isinstance(usage.get(key), int):
            span.set_attribute(f"gen_ai.usage.{key}", usage[key])
    if reply.get("finish_reason"):
        span.set_attribute("gen_ai.response.finish_reasons", [str(reply["finish_reason"])])
