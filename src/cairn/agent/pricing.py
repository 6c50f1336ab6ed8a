"""Token usage and its estimated cost, from a price table the user can override.

Prices are US dollars per million tokens, as providers list them. The defaults
below are list prices noted when this table was written; they change, and
discounts (batch APIs, contracts) are not known here, so every cost cairn shows
is an *estimate*. Override it with your own::

    prices = PriceTable({"my-model": Price(input=0.5, output=1.5)})
    ctx.llm(conv, model="my-model", prices=prices)

or merge onto the defaults: ``DEFAULT_PRICES.with_prices({...})``. A model name
matches its exact entry, else the longest entry it starts with, so dated names
such as ``gpt-4o-2024-08-06`` find ``gpt-4o``. An unknown model has no cost
(None), never a made-up one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens one call used. ``input_tokens`` includes the ``cached_tokens`` read
    from a prompt cache. ``estimated`` is True when the provider reported nothing
    and cairn counted them itself."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    estimated: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_tokens": self.cached_tokens,
            "estimated": self.estimated,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Usage:
        if not data:
            return cls()
        return cls(
            int(data.get("input_tokens", 0)),
            int(data.get("output_tokens", 0)),
            int(data.get("cached_tokens", 0)),
            bool(data.get("estimated", False)),
        )

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_tokens + other.cached_tokens,
            self.estimated or other.estimated,
        )


@dataclass(frozen=True, slots=True)
class Price:
    """Dollars per million tokens. ``cached_input`` defaults to ``input``."""

    input: float
    output: float
    cached_input: float | None = None

    def cost(self, usage: Usage) -> float:
        cached = min(usage.cached_tokens, usage.input_tokens)
        cached_rate = self.input if self.cached_input is None else self.cached_input
        fresh = usage.input_tokens - cached
        return (fresh * self.input + cached * cached_rate + usage.output_tokens * self.output) / 1e6


class PriceTable:
    """Model name → ``Price``; see the module doc for how names match."""

    def __init__(self, prices: Mapping[str, Price]) -> None:
        self._prices = dict(prices)
        # Longest first, so "gpt-4o-mini-2024-07-18" finds gpt-4o-mini, not gpt-4o.
        self._prefixes = sorted(self._prices, key=len, reverse=True)

    def price_of(self, model: str | None) -> Price | None:
        if not model:
            return None
        found = self._prices.get(model)
        if found is not None:
            return found
        bare = model.rsplit("/", 1)[-1]  # "openai/gpt-4o" as routers name it
        for name in self._prefixes:
            if bare.startswith(name):
                return self._prices[name]
        return None

    def cost(self, model: str | None, usage: Usage) -> float | None:
        """The estimated cost of ``usage`` on ``model``, or None if its price is unknown."""
        price = self.price_of(model)
        return None if price is None else round(price.cost(usage), 8)

    def saving(self, model: str | None, saved_tokens: int, cached_tokens: int) -> float | None:
        """What ``saved_tokens`` input tokens not sent to ``model`` saved, or None if
        its price is unknown: at the cached-input rate when the call read from a
        prompt cache (the saved tokens are the older part of an append-only
        prompt, which the cache would have held), else at the input rate."""
        price = self.price_of(model)
        if price is None:
            return None
        rate = price.input
        if cached_tokens > 0 and price.cached_input is not None:
            rate = price.cached_input
        return round(max(0, saved_tokens) * rate / 1e6, 8)

    def with_prices(self, prices: Mapping[str, Price]) -> PriceTable:
        """This table with ``prices`` added or replaced."""
        return PriceTable({**self._prices, **prices})

    def as_dict(self) -> dict[str, Price]:
        return dict(self._prices)

    @classmethod
    def from_json(cls, data: Mapping[str, Mapping[str, float]]) -> PriceTable:
        """From ``{"model": {"input": 2.5, "output": 10, "cached_input": 1.25}}``."""
        return cls(
            {
                name: Price(
                    float(entry["input"]),
                    float(entry["output"]),
                    None if entry.get("cached_input") is None else float(entry["cached_input"]),
                )
                for name, entry in data.items()
            }
        )


DEFAULT_PRICES = PriceTable(
    {
        "gpt-4o": Price(2.50, 10.00, 1.25),
        "gpt-4o-mini": Price(0.15, 0.60, 0.075),
        "gpt-4.1": Price(2.00, 8.00, 0.50),
        "gpt-4.1-mini": Price(0.40, 1.60, 0.10),
        "gpt-4.1-nano": Price(0.10, 0.40, 0.025),
        "o3": Price(2.00, 8.00, 0.50),
        "o4-mini": Price(1.10, 4.40, 0.275),
        "claude-3-5-haiku": Price(0.80, 4.00, 0.08),
        "claude-3-5-sonnet": Price(3.00, 15.00, 0.30),
        "claude-3-7-sonnet": Price(3.00, 15.00, 0.30),
        "claude-sonnet-4": Price(3.00, 15.00, 0.30),
        "claude-opus-4": Price(15.00, 75.00, 1.50),
    }
)
