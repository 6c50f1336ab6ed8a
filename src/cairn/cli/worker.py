"""``cairn worker MODULE:APP``: claim and run tasks until stopped."""

from __future__ import annotations

import importlib
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated, Any

import typer

from cairn.app import Cairn
from cairn.errors import CairnError, ConfigurationError
from cairn.observe._time import parse_duration
from cairn.observe.failures import FailureWatcher
from cairn.observe.lane import serve_lane
from cairn.observe.notifiers import notifiers_for
from cairn.observe.stalls import StallWatcher
from cairn.worker import Worker

from ._consoles import fail
from ._log_option import LogFormatOption, set_up_logging
from ._store_option import opened_store


def load_app(target: str) -> Cairn:
    """The ``Cairn`` instance named by ``module:attribute`` (importable from here)."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        fail(f"{target!r} is not MODULE:APP, e.g. myproject.batch:app")
    # Like `python -m`: modules in the current directory are importable.
    sys.path.insert(0, str(Path.cwd()))
    try:
        found: object = importlib.import_module(module_name)
    except ImportError as exc:
        fail(f"cannot import {module_name!r}: {exc}")
    for part in attribute.split("."):
        found = getattr(found, part, None)
        if found is None:
            fail(f"module {module_name!r} has no {attribute!r}")
    if not isinstance(found, Cairn):
        fail(f"{target} is a {type(found).__name__}, not a cairn.Cairn app")
    return found


# The options of `cairn worker`, named here so its signature reads as a list.
ConcurrencyOption = Annotated[
    int, typer.Option("--concurrency", "-c", min=1, help="Tasks run at once.")
]
BurstOption = Annotated[bool, typer.Option("--burst", help="Stop once nothing is left to run.")]
IdleWaitOption = Annotated[
    float,
    typer.Option("--idle-wait", min=0.01, help="Seconds between looks for work when idle."),
]
AppStoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        envvar="CAIRN_STORE",
        show_envvar=True,
        metavar="URL",
        help="Override the app's store (default: the app's own).",
    ),
]
VersionsOption = Annotated[
    str | None,
    typer.Option(
        "--versions",
        metavar="V1,V2",
        help="Claim only tasks of these app versions (the one a task started on), and "
        "tasks of none; default: any. `current` stands for MODULE:APP's own version.",
    ),
]
WatchOption = Annotated[
    bool,
    typer.Option(
        "--watch", help="Also watch for stalled and failed tasks (as `cairn watch` does)."
    ),
]
StallAfterOption = Annotated[
    str, typer.Option("--stall-after", metavar="DURATION", help="With --watch.")
]
SlackOption = Annotated[
    list[str] | None,
    typer.Option("--slack", metavar="URL", help="With --watch: chat webhook for alerts."),
]
WebhookOption = Annotated[
    list[str] | None,
    typer.Option("--webhook", metavar="URL", help="With --watch: JSON webhook for alerts."),
]


OtlpOption = Annotated[
    str | None,
    typer.Option(
        "--otlp",
        metavar="URL",
        help="Send live OpenTelemetry spans to this OTLP/HTTP traces URL (cairn-durable[otel]).",
    ),
]
LaneOption = Annotated[
    bool,
    typer.Option(
        "--lane", help="Serve streamed model text to `cairn tail` (nothing of it is stored)."
    ),
]
ServiceOption = Annotated[
    str | None,
    typer.Option("--service", metavar="NAME", help="With --otlp: service.name (default: cairn)."),
]


def worker_command(
    target: Annotated[str, typer.Argument(metavar="MODULE:APP", help="Where the app is.")],
    concurrency: ConcurrencyOption = 4,
    burst: BurstOption = False,
    idle_wait: IdleWaitOption = 5.0,
    store: AppStoreOption = None,
    watch: WatchOption = False,
    stall_after: StallAfterOption = "15m",
    slack: SlackOption = None,
    webhook: WebhookOption = None,
    log_format: LogFormatOption = "text",
    otlp: OtlpOption = None,
    service: ServiceOption = None,
    versions: VersionsOption = None,
    lane: LaneOption = False,
) -> None:
    """Claim and run tasks of any batch whose function MODULE:APP registers.

    SIGTERM or Ctrl-C: stop claiming and let running tasks finish; a second one
    hands them back at once. Run as many workers, on as many machines, as you like.
    """
    set_up_logging(log_format)
    app = load_app(target)
    if store is not None:
        app.use_store(store)
    watcher = _start_watcher(app, stall_after, slack, webhook) if watch else None
    tracing = _start_tracing(app, otlp, service) if otlp else None
    token_lane = serve_lane(app) if lane else None  # after tracing: it passes events on
    try:
        claims = _versions(app, versions)
        worker = Worker(
            app, concurrency=concurrency, idle_wait=idle_wait, burst=burst, versions=claims
        )
        worker.install_signal_handlers()
        try:
            report = worker.run()
        finally:
            _ignore_stop_signals()
    except (CairnError, ValueError) as exc:
        fail(str(exc))
    finally:
        if watcher is not None:
            watcher.stop()
        if tracing is not None:
            tracing.shutdown()  # sends the spans still queued
        if token_lane is not None:
            token_lane.close()
        app.close()
    logging.getLogger("cairn").info(
        "cairn worker: ran %d task(s): %d completed, %d failed, %d lost, %d handed back",
        report.ran,
        report.completed,
        report.failed,
        report.lost,
        len(report.handed_back),
    )


def _ignore_stop_signals() -> None:
    """The worker has stopped: a stop signal from now on asks for what is already
    happening. Its handler would only note it, but while the interpreter shuts
    down Python puts back the default action of the signals it handled, and a
    SIGTERM then would end a clean run by signal 15 instead of exit code 0."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_IGN)


def _versions(app: Cairn, given: str | None) -> list[str] | None:
    """The versions ``--versions`` names (``current``: the app's own), or None."""
    if given is None:
        return None
    named = [part.strip() for part in given.split(",") if part.strip()]
    if not named:
        fail("--versions names no version; give e.g. --versions v1,v2 or --versions current")
    return [app.version if name == "current" else name for name in named]


def _start_watcher(
    app: Cairn, stall_after: str, slack: list[str] | None, webhook: list[str] | None
) -> StallWatcher:
    """A stall watcher on its own app (same store): it checks once now, then every
    minute in a daemon thread beside the worker."""
    try:
        threshold = parse_duration(stall_after)
    except ValueError as exc:
        fail(str(exc))
    watcher_app = Cairn(app.store_url)
    watcher = StallWatcher(
        watcher_app, notifiers_for(slack=slack, webhook=webhook), stall_after=threshold
    )
    FailureWatcher(watcher)  # and failures, as `cairn watch` announces them
    watcher.check()  # once now, so even a short --burst run looks before it ends
    threading.Thread(
        target=watcher.run_forever, args=(60.0,), name="cairn-stall-watch", daemon=True
    ).start()
    return watcher


def migrate_command(
    store: Annotated[
        str,
        typer.Option(
            "--store",
            envvar="CAIRN_STORE",
            show_envvar=True,
            metavar="URL",
            help="The store to create or upgrade.",
        ),
    ],
) -> None:
    """Create the store's tables, or upgrade them to this cairn's schema, and say
    which it did."""
    with opened_store(store, create=True) as opened:
        typer.echo(f"{store}: {migration_done(opened.found_schema, opened.schema_version)}")


def migration_done(found: int, latest: int) -> str:
    """What opening the store did to its schema, in one phrase."""
    if found == 0:
        return f"created the schema at version {latest}"
    if found < latest:
        return f"upgraded the schema from version {found} to {latest}"
    return f"the schema is already current (version {latest})"


def _start_tracing(app: Cairn, endpoint: str, service: str | None) -> Any:
    """Live spans of the worker's tasks to ``endpoint``; the tracer provider."""
    try:
        from cairn.observe.live import trace_live

        return trace_live(app, endpoint=endpoint, service=service)
    except (ConfigurationError, ImportError) as exc:
        fail(f"--otlp needs OpenTelemetry: pip install 'cairn-durable[otel]' ({exc})")
