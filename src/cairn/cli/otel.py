"""``cairn otel-export``: OpenTelemetry spans of finished tasks and their steps."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cairn.clock import SystemClock
from cairn.errors import CairnError
from cairn.observe._time import parse_moment
from cairn.observe.otel import export_spans

from ._consoles import fail
from ._store_option import DEFAULT_URL, StoreOption, opened_store


def _provider(endpoint: str | None) -> Any:
    """A tracer provider printing spans as JSON, or sending them over OTLP/HTTP."""
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
    except ImportError:
        fail("cairn otel-export needs OpenTelemetry: pip install 'cairn[otel]'")
    provider = TracerProvider()
    if endpoint is None:
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
        return provider
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[import-not-found]
            OTLPSpanExporter,
        )
    except ImportError:
        fail("--otlp needs pip install opentelemetry-exporter-otlp-proto-http")
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    return provider


def otel_command(
    batch: Annotated[str | None, typer.Option("--batch", "-b", help="Only this batch.")] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", metavar="T", help="Tasks finished since T (24h, 2026-05-24)."),
    ] = None,
    otlp: Annotated[
        str | None,
        typer.Option("--otlp", metavar="URL", help="OTLP/HTTP traces endpoint (default: print)."),
    ] = None,
    store: StoreOption = DEFAULT_URL,
) -> None:
    """Emit one span per finished task and one child span per step, with the recorded
    start and finish times (printed as JSON, or sent to an OTLP endpoint)."""
    try:
        start = None if since is None else parse_moment(since, SystemClock().now())
    except ValueError as exc:
        fail(str(exc))
    provider = _provider(otlp)
    with opened_store(store) as opened:
        try:
            count = export_spans(opened, provider, batch=batch, since=start)
        except CairnError as exc:
            fail(str(exc))
    provider.shutdown()
    typer.echo(f"exported {count} task(s)", err=True)
