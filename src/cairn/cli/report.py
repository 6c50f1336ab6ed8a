"""``cairn report``: what ran in a window; ``--post`` sends a day's report once."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Annotated

import typer

from cairn.app import Cairn
from cairn.clock import SystemClock
from cairn.errors import CairnError
from cairn.observe._time import day_bounds, parse_moment
from cairn.observe.notifiers import notifiers_for
from cairn.observe.report import DailyReporter, day_report, report_for

from ._consoles import fail
from ._store_option import DEFAULT_URL, StoreOption, opened_store


def _day(text: str | None) -> date:
    if text is None:
        return (SystemClock().now() - timedelta(days=1)).date()  # yesterday (UTC): a whole day
    try:
        return date.fromisoformat(text)
    except ValueError:
        fail(f"--day {text!r} is not a date like 2026-05-24")


def report_command(
    since: Annotated[
        str | None,
        typer.Option(
            "--since", metavar="T", help="Report tasks created since T (24h, 2026-05-24)."
        ),
    ] = None,
    day: Annotated[
        str | None,
        typer.Option(
            "--day", metavar="YYYY-MM-DD", help="Report one UTC day (default: yesterday)."
        ),
    ] = None,
    post: Annotated[
        bool, typer.Option("--post", help="Post the day's report, at most once per day.")
    ] = False,
    webhook: Annotated[
        list[str] | None,
        typer.Option("--webhook", metavar="URL", help="With --post: a chat webhook (repeatable)."),
    ] = None,
    partial: Annotated[
        bool, typer.Option("--partial", help="Allow a --day that is not over yet (UTC).")
    ] = False,
    store: StoreOption = DEFAULT_URL,
) -> None:
    """Batches, completed and failed tasks, and the durability metrics of a window.
    With --post, the day's report goes to each --webhook once (a rerun posts nothing)."""
    if since is not None and (day is not None or post):
        fail("--since reports any window but cannot be posted; use --day with --post")
    if post and not webhook:
        fail("--post needs at least one --webhook URL")
    chosen = _day(day) if since is None else None
    if chosen is not None and not partial and day_bounds(chosen)[1] > SystemClock().now():
        fail(f"{chosen} is not over yet (UTC); report a finished day, or pass --partial")
    if post and chosen is not None:
        _post(store, chosen, webhook or [], partial)
        return
    with opened_store(store) as opened:
        if since is not None:
            try:
                start = parse_moment(since, SystemClock().now())
            except ValueError as exc:
                fail(str(exc))
            typer.echo(report_for(opened, start, None))
        else:
            typer.echo(day_report(opened, chosen or _day(day)))


def _post(store: str, day: date, urls: list[str], partial: bool) -> None:
    with opened_store(store):
        pass  # refuse a store that does not exist, before writing anything
    with Cairn(store) as app:
        reporter = DailyReporter(app, notifiers_for(slack=urls, log_too=False))
        try:
            text = reporter.post(day, partial=partial)
        except (CairnError, ValueError) as exc:
            fail(f"the report of {day} was not posted: {exc}")
    start, _ = day_bounds(day)
    typer.echo(text)
    typer.echo(f"posted the report of {start.date()} (once: a rerun posts nothing)", err=True)
