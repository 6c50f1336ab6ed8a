"""Budget alerts for ``cairn watch``: each alert a budget's spend raised (its
warning share passed, a call refused: ``cairn.engine.budgets`` notes both in
the store, once per raise) is posted to the watcher's notifiers once, like a
stall alert, keyed by the budget, the alert and how many times it was raised.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cairn.budgets import nanos_to_usd
from cairn.observe.text import task_label
from cairn.store.admin import AdminStore
from cairn.store.records import BudgetRecord

BUDGET = "budget/"


@dataclass(frozen=True)
class BudgetAlert:
    """One alert to post: its alert task's id, what it is about, and its message."""

    alert_id: str
    scope: str
    checkpoint: str
    text: str
    fields: dict[str, Any]
    title: str


def budget_alerts(store: AdminStore) -> list[BudgetAlert]:
    """Every alert the store's budgets have raised since their last raise."""
    found = []
    for budget in store.budgets_like(""):
        raised = [
            w
            for w, at in (("warned", budget.warned_at), ("reached", budget.reached_at))
            if at is not None
        ]
        if raised:
            shown = _shown_scope(store, budget.scope)
            found += [_alert(budget, which, shown) for which in raised]
    return found


def _shown_scope(store: AdminStore, scope: str) -> str:
    """``scope`` as an alert names it: a task's by its key as given, its id after
    (``task:url=a b (crawl/sha256:…)``), as the task list shows it."""
    kind, _, task_id = scope.partition(":")
    if kind != "task":
        return scope
    task = store.get_task(task_id)
    if task is None:
        return scope
    return f"task:{task_label(task_id, task.item_key, task.args, task.codec)}"


def _spend(budget: BudgetRecord) -> str:
    parts = []
    if budget.usd_nanos is not None:
        usd = nanos_to_usd(budget.spent_usd_nanos)
        parts.append(f"${usd:,.6f} of ${nanos_to_usd(budget.usd_nanos):,.6f}")
    if budget.tokens is not None:
        parts.append(f"{budget.spent_tokens:,} of {budget.tokens:,} tokens")
    return "; ".join(parts)


def _alert(budget: BudgetRecord, which: str, shown: str) -> BudgetAlert:
    scope = budget.scope
    kind, _, name = scope.partition(":")
    raise_it = f"cairn budget {name}" if kind == "batch" else f"cairn budget --task {name}"
    if which == "warned":
        text = (
            f"cairn: budget {shown} passed {budget.warn_at:.0%} of its cap: {_spend(budget)} spent"
        )
        title = f"Budget at {budget.warn_at:.0%}: {shown}"
    else:
        text = (
            f"cairn: budget {shown} reached: {_spend(budget)} spent or reserved; "
            f"{len(budget.parked)} task(s) parked until it is raised ({raise_it} --raise ...)"
        )
        title = f"Budget reached: {shown}"
    fields = {
        "budget": scope,
        "alert": which,
        "usd": None if budget.usd_nanos is None else nanos_to_usd(budget.usd_nanos),
        "spent_usd": nanos_to_usd(budget.spent_usd_nanos),
        "tokens": budget.tokens,
        "spent_tokens": budget.spent_tokens,
        "parked": len(budget.parked),
    }
    checkpoint = f"{which}-{budget.raised}"
    return BudgetAlert(f"{BUDGET}{scope}/{checkpoint}", scope, checkpoint, text, fields, title)
