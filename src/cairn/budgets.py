"""Budgets: a cap on what model calls may spend, in dollars and tokens.

Declared on a task (``@app.task(budget=Budget(usd=2))``: the task and every
task it spawns, all their attempts) or on a batch
(``app.run_batch(..., budget=Budget(usd=20))``: every task of it)::

    app.run_batch("review", review, items, budget=Budget(usd=20, tokens=5_000_000))

Before a model call is sent, its worst case (the prompt's tokens, counted
exactly, plus its ``max_tokens``, priced with the call's price table) is
reserved against every budget it falls under; after, the reservation is
settled to the usage the provider reported. A call that would pass a budget
is not sent: its task *parks* (it waits, holding no process, and ``cairn
budget`` lists it) until someone raises the budget (``cairn budget BATCH
--raise usd=30``), and then goes on from where it stopped. An alert is
logged once when the spend passes ``warn`` of the budget, and once when a
call is refused (``cairn.budget`` logger). This module holds the value; the
engine side is ``cairn.engine.budgets``.
"""

from __future__ import annotations

import math

from cairn.errors import ConfigurationError

NANOS_PER_USD = 1_000_000_000


def _positive(value: object, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"{what} must be a number, not {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise ConfigurationError(f"{what} must be positive and finite, not {value!r}")
    return float(value)


class Budget:
    """At most ``usd`` dollars and/or ``tokens`` tokens of model calls; an alert
    when the spend passes ``warn`` (a share, 0.8 by default) of either."""

    __slots__ = ("tokens", "usd", "warn")

    def __init__(
        self, *, usd: float | None = None, tokens: int | None = None, warn: float = 0.8
    ) -> None:
        what = f"Budget(usd={usd!r}, tokens={tokens!r})"
        self.usd = _positive(usd, f"{what}: usd")
        if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int)):
            raise ConfigurationError(f"{what}: tokens must be a whole number")
        self.tokens = None if tokens is None else int(_positive(tokens, f"{what}: tokens") or 0)
        if self.usd is None and self.tokens is None:
            raise ConfigurationError(f"{what}: give usd=, tokens= or both")
        share = _positive(warn, f"{what}: warn")
        if share is None or share > 1:
            raise ConfigurationError(f"{what}: warn must be a share above 0, at most 1")
        self.warn = share

    @property
    def usd_nanos(self) -> int | None:
        """The dollar cap in nano-dollars, as the store keeps it."""
        return None if self.usd is None else usd_to_nanos(self.usd)

    def __repr__(self) -> str:
        parts = [f"usd={self.usd:g}" if self.usd is not None else ""]
        parts.append(f"tokens={self.tokens}" if self.tokens is not None else "")
        return f"Budget({', '.join(p for p in parts if p)}, warn={self.warn:g})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Budget) and (self.usd, self.tokens, self.warn) == (
            other.usd,
            other.tokens,
            other.warn,
        )

    def __hash__(self) -> int:
        return hash((Budget, self.usd, self.tokens, self.warn))


def usd_to_nanos(usd: float) -> int:
    """Dollars as whole nano-dollars (a call's cost keeps its precision)."""
    return round(usd * NANOS_PER_USD)


def nanos_to_usd(nanos: int) -> float:
    return nanos / NANOS_PER_USD


def batch_scope(batch: str) -> str:
    """The store's name of a batch's budget."""
    return f"batch:{batch}"


def task_scope(task_id: str) -> str:
    """The store's name of a task's budget."""
    return f"task:{task_id}"
