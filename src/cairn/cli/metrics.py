"""``cairn metrics``: the durability metrics of a store; ``--serve`` exports them
to Prometheus."""

from __future__ import annotations

import threading
from typing import Annotated

import typer

from cairn.clock import SystemClock
from cairn.errors import CairnError
from cairn.observe._time import parse_moment
from cairn.observe.metrics import compute
from cairn.observe.text import metrics_lines
from cairn.store.reports import Window

from ._consoles import fail
from ._json_output import JsonOption, print_json
from ._store_option import DEFAULT_URL, StoreOption, opened_store, require_batch

SinceOption = Annotated[
    str | None,
    typer.Option(
        "--since",
        metavar="T",
        help="Only tasks created since T: a time (2026-05-24, 2026-05-24T06:00Z) or a "
        "duration ago (24h, 7d).",
    ),
]


def window_of(batch: str | None, since: str | None) -> Window:
    """The window the options name (the CLI's own --since parsing)."""
    try:
        start = None if since is None else parse_moment(since, SystemClock().now())
    except ValueError as exc:
        fail(str(exc))
    return Window(since=start, batch=batch)


def metrics_command(
    batch: Annotated[
        str | None, typer.Option("--batch", "-b", help="Only tasks of this batch.")
    ] = None,
    since: SinceOption = None,
    serve: Annotated[
        str | None,
        typer.Option(
            "--serve",
            metavar="[HOST]:PORT",
            help="Serve the metrics for Prometheus at http://HOST:PORT/metrics instead "
            "(HOST defaults to 127.0.0.1; needs cairn-durable[prometheus]).",
        ),
    ] = None,
    store: StoreOption = DEFAULT_URL,
    as_json: JsonOption = False,
) -> None:
    """Restart success, suspect re-runs, redundant execution, batch wall-clock, step
    durations, retries and failures by type (see docs/observability.md)."""
    window = window_of(batch, since)
    if serve is not None:
        _serve(store, serve, window)
        return
    with opened_store(store) as opened:
        if batch is not None:
            require_batch(opened, batch)
        metrics = compute(opened, window)
    if as_json:
        print_json(metrics.to_json())
        return
    for line in metrics_lines(metrics):
        typer.echo(line)


def _serve(store: str, address: str, window: Window) -> None:
    """Serve /metrics until interrupted."""
    from cairn.observe.prometheus import registry_for, start_server

    with opened_store(store) as opened:
        try:
            server, _thread = start_server(registry_for(opened, window, SystemClock().now), address)
        except (CairnError, OSError) as exc:
            fail(f"cannot serve metrics at {address}: {exc}")
        host, port = server.server_address[:2]
        typer.echo(f"serving cairn metrics at http://{host}:{port}/metrics", err=True)
        try:
            threading.Event().wait()  # until Ctrl-C or SIGTERM
        except KeyboardInterrupt:
            pass
        finally:
            server.shutdown()
