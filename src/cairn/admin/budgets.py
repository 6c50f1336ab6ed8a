"""Budgets as an operator sees them: what a batch (or task) may spend, what it
spent (its children and failed attempts included, running calls' reservations
counted), which tasks are parked on it; and raising it, which wakes them.

The rules (reserve, settle, park) are the engine's (``cairn.engine.budgets``);
this module reads them and makes the one operator action, written to the
audit trail.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cairn.admin.audit import Actor, audit
from cairn.budgets import batch_scope, nanos_to_usd, task_scope, usd_to_nanos
from cairn.store import AdminStore
from cairn.store.records import BudgetRecord

__all__ = [
    "BudgetView",
    "Raised",
    "budget_line",
    "budget_scope",
    "budget_view",
    "budget_views",
    "raise_budget",
]


def budget_scope(batch: str | None = None, task_id: str | None = None) -> str:
    """The store's name of a batch's (or a task's) budget."""
    if (batch is None) == (task_id is None):
        raise ValueError("name a batch or a task, not both")
    return batch_scope(batch) if batch is not None else task_scope(str(task_id))


@dataclass(frozen=True, slots=True)
class BudgetView:
    """One budget, for people and for JSON."""

    scope: str
    usd: float | None
    tokens: int | None
    spent_usd: float
    spent_tokens: int
    reserved_usd: float
    reserved_tokens: int
    warn: float
    raised: int
    warned_at: datetime | None
    reached_at: datetime | None
    parked: tuple[str, ...]

    @property
    def status(self) -> str:
        """``parked`` (tasks wait for a raise), ``reached``, ``warned`` or ``ok``."""
        if self.parked:
            return "parked"
        if self.reached_at is not None:
            return "reached"
        return "warned" if self.warned_at is not None else "ok"

    def share(self) -> float | None:
        """The larger of the spent shares of the caps."""
        shares = []
        if self.usd:
            shares.append(self.spent_usd / self.usd)
        if self.tokens:
            shares.append(self.spent_tokens / self.tokens)
        return max(shares) if shares else None

    def to_json(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "status": self.status,
            "usd": self.usd,
            "tokens": self.tokens,
            "spent_usd": self.spent_usd,
            "spent_tokens": self.spent_tokens,
            "reserved_usd": self.reserved_usd,
            "reserved_tokens": self.reserved_tokens,
            "warn": self.warn,
            "raised": self.raised,
            "warned_at": None if self.warned_at is None else self.warned_at.isoformat(),
            "reached_at": None if self.reached_at is None else self.reached_at.isoformat(),
            "parked": list(self.parked),
        }


def _view(record: BudgetRecord) -> BudgetView:
    return BudgetView(
        scope=record.scope,
        usd=None if record.usd_nanos is None else nanos_to_usd(record.usd_nanos),
        tokens=record.tokens,
        spent_usd=nanos_to_usd(record.spent_usd_nanos),
        spent_tokens=record.spent_tokens,
        reserved_usd=nanos_to_usd(record.held_usd_nanos),
        reserved_tokens=record.held_tokens,
        warn=record.warn_at,
        raised=record.raised,
        warned_at=record.warned_at,
        reached_at=record.reached_at,
        parked=record.parked,
    )


def budget_view(store: AdminStore, scope: str) -> BudgetView | None:
    """Budget ``scope`` (``budget_scope``), or None if it has none."""
    record = store.get_budget(scope)
    return None if record is None else _view(record)


def budget_views(store: AdminStore, batch: str | None = None) -> list[BudgetView]:
    """The budget of ``batch``, or of every batch that has one (None)."""
    if batch is not None:
        found = budget_view(store, batch_scope(batch))
        return [] if found is None else [found]
    return [_view(record) for record in store.budgets_like(batch_scope(""))]


def budget_line(view: BudgetView) -> str:
    """One line of spend against a budget, as ``cairn cost`` prints it."""
    parts = []
    if view.usd is not None:
        parts.append(f"${view.spent_usd:,.6f} of ${view.usd:,.6f}")
    if view.tokens is not None:
        parts.append(f"{view.spent_tokens:,} of {view.tokens:,} tokens")
    share = view.share()
    shown = "" if share is None else f" ({share:.1%})"
    parked = f", {len(view.parked)} task(s) parked" if view.parked else ""
    return f"budget {view.scope}: {'; '.join(parts)} spent{shown}, {view.status}{parked}"


@dataclass(frozen=True, slots=True)
class Raised:
    """What a raise did: the budget after it (None: there is none), the tasks it woke."""

    view: BudgetView | None
    woken: list[str]
    message: str


def raise_budget(
    store: AdminStore,
    scope: str,
    now: datetime,
    *,
    usd: float | None = None,
    tokens: int | None = None,
    actor: Actor | None = None,
) -> Raised:
    """Set budget ``scope``'s caps to ``usd`` and/or ``tokens`` (the other one
    stays), re-arm its alerts and wake every task parked on it."""
    if usd is None and tokens is None:
        raise ValueError("give the new cap: usd=..., tokens=... or both")
    for value, what in ((usd, "usd"), (tokens, "tokens")):
        if value is not None and not value > 0:
            raise ValueError(f"the new {what} cap must be positive, not {value}")
    detail = {"usd": usd, "tokens": tokens}
    with audit(store, actor, "budget", scope, now, detail) as entry:
        nanos = None if usd is None else usd_to_nanos(usd)
        woken = store.raise_budget(scope, nanos, tokens, now)
        if woken is None:
            entry.done(0, "no such budget")
            return Raised(None, [], f"{scope} has no budget; nothing changed")
        view = budget_view(store, scope)
        caps = ", ".join(f"{k}={v:g}" for k, v in detail.items() if v is not None)
        message = f"raised {scope} to {caps}; woke {len(woken)} parked task(s)"
        entry.done(len(woken), message)
    return Raised(view, woken, message)
