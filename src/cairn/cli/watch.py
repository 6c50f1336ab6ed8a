"""``cairn watch``: alert once per stalled task, and once when it moves again;
once per task that fails for good, and once per batch that ends with failures."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from cairn.app import Cairn
from cairn.observe._time import parse_duration
from cairn.observe.failures import DEFAULT_DIGEST_AT, FailureWatcher
from cairn.observe.notifiers import Notifier, notifiers_for
from cairn.observe.stalls import StallWatcher
from cairn.observe.text import in_words
from cairn.store.postgres import redacted

from ._consoles import fail
from ._log_option import LogFormatOption, set_up_logging
from ._store_option import DEFAULT_URL, StoreOption, opened_store

StallAfterOption = Annotated[
    str,
    typer.Option(
        "--stall-after", metavar="DURATION", help="No checkpoint for this long is a stall."
    ),
]
WebhookOption = Annotated[
    list[str] | None,
    typer.Option("--webhook", metavar="URL", help="POST alerts as JSON here (repeatable)."),
]
SlackOption = Annotated[
    list[str] | None,
    typer.Option("--slack", metavar="URL", help="Post alerts to this chat webhook (repeatable)."),
]
IntervalOption = Annotated[
    float, typer.Option("--interval", min=0.01, help="Seconds between checks.")
]
OnceOption = Annotated[bool, typer.Option("--once", help="Check once and exit.")]
FailuresOption = Annotated[
    bool,
    typer.Option(
        "--failures/--no-failures",
        help="Also announce each task that fails for good, and each batch that ends with failures.",
    ),
]
DigestAtOption = Annotated[
    int,
    typer.Option(
        "--digest-at",
        min=1,
        metavar="N",
        help="More new failures of one batch than N at one check are one digest message.",
    ),
]
DashboardOption = Annotated[
    str | None,
    typer.Option(
        "--dashboard", metavar="URL", help="Link alerts to this `cairn ui` (its base URL)."
    ),
]


def watch_command(
    stall_after: StallAfterOption = "15m",
    webhook: WebhookOption = None,
    slack: SlackOption = None,
    interval: IntervalOption = 60.0,
    once: OnceOption = False,
    dashboard: DashboardOption = None,
    failures: FailuresOption = True,
    digest_at: DigestAtOption = DEFAULT_DIGEST_AT,
    log_format: LogFormatOption = "text",
    store: StoreOption = DEFAULT_URL,
) -> None:
    """Watch running tasks; raise an alert once per stall (logged, and posted to each
    --slack/--webhook URL), and a recovery message once it clears. Announce once each
    task that fails for good (or one digest per batch per check when many do) and each
    batch that ends with failures; post each budget alert (spend past its warning
    share, a call refused) once. Safe to restart: alerts already sent are recorded in
    the store and never sent twice."""
    try:
        threshold = parse_duration(stall_after)
    except ValueError as exc:
        fail(str(exc))
    with opened_store(store):
        pass  # refuse a store that does not exist, before writing anything
    set_up_logging(log_format)
    with Cairn(store) as app:
        watcher = StallWatcher(
            app,
            notifiers_for(slack=slack, webhook=webhook),
            stall_after=threshold,
            dashboard=dashboard,
        )
        if failures:
            FailureWatcher(watcher, digest_at=digest_at)
        _start_line(store, threshold, interval, once, watcher.notifiers)
        _watch(watcher, interval, once)


def _watch(watcher: StallWatcher, interval: float, once: bool) -> None:
    """Check once (exit 1 if an alert could not be sent), or until interrupted."""
    if once:
        result = watcher.check()
        typer.echo(
            f"{len(result.stalls)} stalled, {len(result.raised)} alerted, "
            f"{len(result.cleared)} cleared, {len(result.failures)} failure message(s)"
        )
        raise typer.Exit(1 if result.errors else 0)
    try:
        watcher.run_forever(interval)
    except KeyboardInterrupt:
        watcher.stop()


def _start_line(
    store: str, threshold: float, interval: float, once: bool, notifiers: list[Notifier]
) -> None:
    """What is watched, the threshold and where alerts go, before the first check."""
    every = "once" if once else f"every {in_words(interval)}"
    sent_to = ", ".join(n.name for n in notifiers)
    logging.getLogger("cairn.observe").info(
        "cairn watch: running tasks of %s; a task with no checkpoint for %s is stalled; "
        "checking %s; alerts to %s",
        redacted(store),
        in_words(threshold),
        every,
        sent_to,
    )
