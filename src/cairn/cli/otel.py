"""``cairn otel-export``: OpenTelemetry spans of finished tasks and their steps."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cairn.clock import SystemClock
from cairn.errors import CairnError
from cairn.observe._time import parse_moment
from cairn.observe.otel import export_spans, provider_for

from ._consoles import fail
from ._store_option import DEFAULT_URL, StoreOption, opened_store


def _provider(endpoint: str | None, service: str | None) -> Any:
    """A tracer provider printing spans as JSON, or sending them over OTLP/HTTP in
    batches (many spans a request), with the ids the live spans have."""
    try:
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter
    except ImportError:
        fail("cairn otel-export needs OpenTelemetry: pip install 'cairn-durable[otel]'")
    if endpoint is None:
        return provider_for(ConsoleSpanExporter(), service)
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        fail(
            "--otlp needs pip install 'cairn-durable[otel]' "
            "(opentelemetry-exporter-otlp-proto-http)"
        )
    return provider_for(OTLPSpanExporter(endpoint=endpoint), service)


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
    service: Annotated[
        str | None,
        typer.Option(
            "--service", metavar="NAME", help="service.name (default: OTEL_SERVICE_NAME or cairn)."
        ),
    ] = None,
    store: StoreOption = DEFAULT_URL,
) -> None:
    """Emit one span per finished task and one child span per step, with the recorded
    start and finish times (printed as JSON, or sent to an OTLP endpoint)."""
    try:
        start = None if since is None else parse_moment(since, SystemClock().now())
    except ValueError as exc:
        fail(str(exc))
    provider = _provider(otlp, service)
    with opened_store(store) as opened:
        try:
            count = export_spans(opened, provider, batch=batch, since=start)
        except CairnError as exc:
            fail(str(exc))
    provider.shutdown()
    typer.echo(f"exported {count} task(s)", err=True)
