"""Spans redacted on their way out: no secret reaches a collector.

Every tracer provider cairn makes (``cairn.observe.otel.provider_for``: live
tracing, ``cairn worker --otlp``, ``cairn otel-export``) exports through
``RedactingExporter``. It hands the exporter a copy of each finished span
whose texts went through ``cairn.redaction.redact``: the status description,
every string attribute (one level into sequences), and the attributes of
every event (an exception event's message and stack trace among them). Spans
of other libraries that run under the same provider (an SDK's own
instrumentation) pass through it too, so none of them carries a key either.
(Imported only where a provider is made: it needs the ``otel`` extra.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import Status

from cairn.redaction import redact


def _value(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Sequence) and not isinstance(value, bytes):
        return tuple(redact(item) if isinstance(item, str) else item for item in value)
    return value


def _attributes(attributes: Mapping[str, Any] | None) -> BoundedAttributes | None:
    """``attributes`` redacted, as the SDK holds them (its exporters read how
    many were dropped, and older SDKs take an event's attributes as given)."""
    if attributes is None:
        return None
    redacted = {key: _value(value) for key, value in attributes.items()}
    bounded = BoundedAttributes(attributes=redacted, immutable=True)
    bounded.dropped = getattr(attributes, "dropped", 0)
    return bounded


def redacted_span(span: ReadableSpan) -> ReadableSpan:
    """A copy of the finished ``span`` (an SDK ``ReadableSpan``) with its texts
    redacted."""
    status = span.status
    description = status.description
    if description:
        status = Status(status.status_code, redact(description))
    events = [
        Event(event.name, _attributes(event.attributes), timestamp=event.timestamp)
        for event in span.events
    ]
    return ReadableSpan(
        name=redact(span.name),
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=_attributes(span.attributes),
        events=events,
        links=span.links,
        kind=span.kind,
        status=status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


class RedactingExporter(SpanExporter):
    """A span exporter that hands ``inner`` redacted copies of the spans."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self.inner.export([redacted_span(span) for span in spans])

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)
