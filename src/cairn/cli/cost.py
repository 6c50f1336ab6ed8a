"""``cairn cost``: tokens and estimated cost per task and per batch, and what
compaction saved: gross (the tokens that would have been sent without it), the
summarizer's cost, and net (``cairn.agent.costs``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from cairn.admin import costs
from cairn.admin.budgets import budget_line, budget_views
from cairn.agent.costs import COST_COLUMNS
from cairn.agent.pricing import PriceTable

from ._consoles import fail, note, stdout_console
from ._json_output import JsonOption, print_json
from ._store_option import DEFAULT_URL, StoreOption, opened_store, require_batch
from ._tables import RowTable


def _prices(path: Path | None) -> PriceTable | None:
    if path is None:
        return None
    try:
        return PriceTable.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        fail(
            f"cannot read prices from {path} ({exc}); write JSON like "
            '{"gpt-4o": {"input": 2.5, "output": 10, "cached_input": 1.25}} (dollars per '
            "million tokens)"
        )


def cost_command(
    batch: Annotated[
        str | None, typer.Option("--batch", "-b", help="One line per task of this batch.")
    ] = None,
    task_id: Annotated[str | None, typer.Option("--task", "-t", help="Only this task.")] = None,
    prices: Annotated[
        Path | None,
        typer.Option(
            "--prices",
            metavar="FILE",
            help="Re-price every call with this JSON price table "
            '({"model": {"input": $/Mtok, "output": $/Mtok, "cached_input": $/Mtok}}).',
        ),
    ] = None,
    store: StoreOption = DEFAULT_URL,
    as_json: JsonOption = False,
) -> None:
    """Tokens in and out and the estimated cost of recorded model calls, per batch (or
    with --batch, per task), with what compaction saved: gross, the summarizer's
    cost, and net. Costs are estimates; "tokens estimated" is the part of the
    tokens that cairn counted itself, for calls whose answer carried no usage.
    Each batch with a budget gets a line of spend against it (see cairn budget)."""
    table = _prices(prices)
    with opened_store(store) as opened:
        if batch is not None:
            require_batch(opened, batch)
        report = costs(opened, batch=batch, task_id=task_id, prices=table)
        budgets = budget_views(opened, batch)
    if as_json:
        print_json(
            {
                "lines": [line.to_json() for line in report.lines],
                "total": report.total.to_json(),
                "budgets": [view.to_json() for view in budgets],
            }
        )
        return
    for budget in budgets:
        note(budget_line(budget))
    if not report.lines:
        note("no recorded model calls")
        return
    view = RowTable(stdout_console(), COST_COLUMNS, right=COST_COLUMNS[1:])
    for line in [*report.lines, report.total]:
        view.add_row(*line.cells())
    view.print()
    if report.total.unpriced_calls:
        note(
            f"{report.total.unpriced_calls} call(s) used a model with no known price; "
            "give one with --prices"
        )
    estimated = report.total.estimated_note()
    if estimated is not None:
        note(estimated)
