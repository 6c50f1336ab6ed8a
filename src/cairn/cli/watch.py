"""``cairn watch``: alert once per stalled task, and once when it moves again."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from cairn.app import Cairn
from cairn.observe._time import parse_duration
from cairn.observe.notifiers import notifiers_for
from cairn.observe.stalls import StallWatcher

from ._consoles import fail
from ._store_option import DEFAULT_URL, StoreOption, opened_store

UrlsOption = Annotated[list[str] | None, typer.Option(metavar="URL")]


def watch_command(
    stall_after: Annotated[
        str,
        typer.Option(
            "--stall-after", metavar="DURATION", help="No checkpoint for this long is a stall."
        ),
    ] = "15m",
    webhook: Annotated[
        list[str] | None,
        typer.Option("--webhook", metavar="URL", help="POST alerts as JSON here (repeatable)."),
    ] = None,
    slack: Annotated[
        list[str] | None,
        typer.Option(
            "--slack", metavar="URL", help="Post alerts to this chat webhook (repeatable)."
        ),
    ] = None,
    interval: Annotated[
        float, typer.Option("--interval", min=0.01, help="Seconds between checks.")
    ] = 60.0,
    once: Annotated[bool, typer.Option("--once", help="Check once and exit.")] = False,
    dashboard: Annotated[
        str | None,
        typer.Option(
            "--dashboard", metavar="URL", help="Link alerts to this `cairn ui` (its base URL)."
        ),
    ] = None,
    store: StoreOption = DEFAULT_URL,
) -> None:
    """Watch running tasks; raise an alert once per stall (logged, and posted to each
    --slack/--webhook URL), and a recovery message once it clears. Safe to restart:
    alerts already sent are recorded in the store and never sent twice."""
    try:
        threshold = parse_duration(stall_after)
    except ValueError as exc:
        fail(str(exc))
    with opened_store(store):
        pass  # refuse a store that does not exist, before writing anything
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    with Cairn(store) as app:
        watcher = StallWatcher(
            app,
            notifiers_for(slack=slack, webhook=webhook),
            stall_after=threshold,
            dashboard=dashboard,
        )
        if once:
            result = watcher.check()
            typer.echo(
                f"{len(result.stalls)} stalled, {len(result.raised)} alerted, "
                f"{len(result.cleared)} cleared"
            )
            raise typer.Exit(1 if result.errors else 0)
        try:
            watcher.run_forever(interval)
        except KeyboardInterrupt:
            watcher.stop()
