"""``cairn budget``: what a batch (or task) may spend, what it spent, which
tasks are parked on it; ``--raise`` sets a new cap and wakes them."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from cairn.admin.budgets import BudgetView, budget_scope, budget_view, raise_budget
from cairn.clock import SystemClock

from ._actor import cli_actor
from ._consoles import fail, stdout_console
from ._json_output import JsonOption, print_json
from ._store_option import DEFAULT_URL, StoreOption, opened_store

_MEASURES = ("usd", "tokens")


def _caps(raises: list[str]) -> tuple[float | None, int | None]:
    """``--raise usd=30 --raise tokens=2000000`` as (usd, tokens)."""
    found: dict[str, str] = {}
    for text in raises:
        name, sep, value = text.partition("=")
        if not sep or name.strip() not in _MEASURES:
            fail(f"--raise takes usd=AMOUNT or tokens=COUNT, not {text!r}")
        found[name.strip()] = value.strip()
    usd = tokens = None
    try:
        if "usd" in found:
            usd = float(found["usd"])
        if "tokens" in found:
            tokens = int(found["tokens"])
    except ValueError:
        fail(f"--raise needs a number after '=', as in usd=30 or tokens=2000000: {raises}")
    return usd, tokens


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:,.6f}"


def _shown(view: BudgetView) -> str:
    lines = [f"budget {view.scope}: {view.status}"]
    if view.usd is not None or view.spent_usd:
        lines.append(
            f"  usd     spent {_money(view.spent_usd)} of {_money(view.usd)}"
            f" (running calls hold {_money(view.reserved_usd)})"
        )
    if view.tokens is not None or view.spent_tokens:
        cap = "-" if view.tokens is None else f"{view.tokens:,}"
        lines.append(
            f"  tokens  spent {view.spent_tokens:,} of {cap}"
            f" (running calls hold {view.reserved_tokens:,})"
        )
    share = view.share()
    if share is not None:
        lines.append(f"  {share:.1%} of the cap; alerts at {view.warn:.0%} and at 100%")
    if view.parked:
        lines.append(f"  parked ({len(view.parked)}): {', '.join(view.parked[:20])}")
        if len(view.parked) > 20:
            lines.append(f"  ... and {len(view.parked) - 20} more")
    return "\n".join(lines)


def budget_command(
    batch: Annotated[
        str | None, typer.Argument(metavar="[BATCH]", help="The batch whose budget to show.")
    ] = None,
    task_id: Annotated[
        str | None, typer.Option("--task", "-t", help="A task's own budget instead.")
    ] = None,
    raises: Annotated[
        list[str] | None,
        typer.Option(
            "--raise",
            metavar="usd=AMOUNT|tokens=COUNT",
            help="Set a new cap (repeat for both); parked tasks go on.",
        ),
    ] = None,
    store: StoreOption = DEFAULT_URL,
    as_json: JsonOption = False,
) -> None:
    """Show a batch's budget (spend against it, reservations of running calls,
    the tasks parked on it), or with --raise set a new cap: the parked tasks
    are woken and go on from the call that was refused."""
    if (batch is None) == (task_id is None):
        fail("name a batch (cairn budget BATCH) or a task (--task TASK), not both")
    scope = budget_scope(batch, task_id)
    with opened_store(store) as opened:
        if raises:
            usd, tokens = _caps(raises)
            try:
                done = raise_budget(
                    opened, scope, SystemClock().now(), usd=usd, tokens=tokens, actor=cli_actor()
                )
            except ValueError as exc:
                fail(str(exc))
            if done.view is None:
                fail(done.message)
            view: BudgetView | None = done.view
            if not as_json:
                stdout_console().print(Text(done.message), soft_wrap=True)
        else:
            view = budget_view(opened, scope)
    if view is None:
        fail(
            f"{scope} has no budget; declare one with app.run_batch(..., budget=Budget(usd=...)) "
            "or @app.task(budget=...)"
        )
    if as_json:
        print_json(view.to_json())
        return
    stdout_console().print(Text(_shown(view)), soft_wrap=True)
