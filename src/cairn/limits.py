"""Shared limits: how often, or how many at once, steps may call a named resource.

Declared once on the app, used by steps::

    app = Cairn(limits={"ads-api": Rate(10, per=60), "db": Concurrency(4)})
    ctx.step("fetch", fetch_ads, account, limit="ads-api")

and, in tokens, by model calls (``TokenRate``, a provider's TPM and RPM)::

    app = Cairn(limits={"openai": TokenRate(200_000, per=60, requests=500)})
    ctx.llm(conv, model="gpt-4o-mini", max_tokens=500)  # counts against it

A limit holds across every thread, process and host that shares the store: each
call takes a *permit* in one store transaction (on PostgreSQL under a lock on the
limit's row), so two workers can never both take the last one. A step that finds
no room waits (``Wait`` effects: never inside a transaction, never an attempt
spent) and asks again (``cairn.engine.permits``). This module holds the
values: the two kinds of limit and the app's book of them.

How a permit counts:

* ``Concurrency(n)``: while its call runs. A holder that dies (SIGKILL) stops
  renewing it with its lease heartbeat, and the permit comes back when the lease
  runs out.
* ``Rate(count, per)``: while its call runs, then for ``per`` seconds after the
  call *ended*. Counting from the end, not the start, is what makes the limit
  exact as the outside server sees it: every request a call sends arrives between
  the permit's grant and the call's end, so no window of ``per`` seconds at the
  server can hold more than ``count`` of them, however the network delays them.
* ``TokenRate(tokens, per, requests=)``: as ``Rate`` for its ``requests``, and
  each permit also holds an amount of tokens: the call's prompt plus its
  ``max_tokens`` while it runs, then the tokens the provider reported, for
  ``per`` seconds after it ended. A call is let through only if the amounts
  counted now leave room for its own. A 429 with ``Retry-After`` closes the
  limit for every caller until then (``cairn.engine.permits``), as does an
  answer whose rate-limit headers say the provider has less room left than
  the call needed, until the provider's reset (``cairn.agent.rate_headers``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from cairn.errors import ConfigurationError
from cairn.names import check_name


def _seconds(per: float | timedelta, what: str) -> float:
    value = per.total_seconds() if isinstance(per, timedelta) else per
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"{what}: per must be seconds or a timedelta, not {per!r}")
    if not (math.isfinite(value) and value > 0):
        raise ConfigurationError(f"{what}: per must be a positive, finite time, not {per!r}")
    return float(value)


def _whole(value: object, what: str, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{what}: {field} must be a whole number of at least 1")
    return value


class Rate:
    """At most ``count`` calls in any ``per`` seconds (a number or a timedelta)."""

    __slots__ = ("count", "per")

    def __init__(self, count: int, per: float | timedelta = 60.0) -> None:
        what = f"Rate({count!r}, per={per!r})"
        self.count = _whole(count, what, "count")
        self.per = _seconds(per, what)

    @property
    def capacity(self) -> int:
        return self.count

    @property
    def window(self) -> timedelta:
        return timedelta(seconds=self.per)

    def __repr__(self) -> str:
        return f"Rate({self.count}, per={self.per:g})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Rate) and (self.count, self.per) == (other.count, other.per)

    def __hash__(self) -> int:
        return hash((Rate, self.count, self.per))


class Concurrency:
    """At most ``n`` calls running at once."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = _whole(n, f"Concurrency({n!r})", "n")

    @property
    def capacity(self) -> int:
        return self.n

    @property
    def window(self) -> timedelta:
        return timedelta(0)

    def __repr__(self) -> str:
        return f"Concurrency({self.n})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Concurrency) and self.n == other.n

    def __hash__(self) -> int:
        return hash((Concurrency, self.n))


class TokenRate:
    """At most ``tokens`` model tokens (prompt plus reply), and at most
    ``requests`` calls if given, in any ``per`` seconds: a provider's TPM and RPM.

    A model call (``ctx.llm``, ``ctx.llm_call``, the integrations' model calls)
    reserves its prompt's tokens, counted exactly before it is sent, plus its
    ``max_tokens`` (``output`` when it sets none); when it returns, the
    reservation is settled to the usage the provider reported and the rest
    is free at once. ``output`` is also what a call without ``max_tokens``
    may really use: set it to the reply size you expect at most.
    """

    __slots__ = ("output", "per", "requests", "tokens")

    def __init__(
        self,
        tokens: int,
        per: float | timedelta = 60.0,
        *,
        requests: int | None = None,
        output: int = 1024,
    ) -> None:
        what = f"TokenRate({tokens!r}, per={per!r}, requests={requests!r})"
        self.tokens = _whole(tokens, what, "tokens")
        self.per = _seconds(per, what)
        self.requests = None if requests is None else _whole(requests, what, "requests")
        self.output = _whole(output, what, "output")

    @property
    def capacity(self) -> int:
        """Calls in a window: ``requests``, or no cap on calls (one per token)."""
        return self.tokens if self.requests is None else self.requests

    @property
    def window(self) -> timedelta:
        return timedelta(seconds=self.per)

    def __repr__(self) -> str:
        requests = "" if self.requests is None else f", requests={self.requests}"
        return f"TokenRate({self.tokens}, per={self.per:g}{requests}, output={self.output})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TokenRate) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash((TokenRate, *self._key()))

    def _key(self) -> tuple[int, float, int | None, int]:
        return (self.tokens, self.per, self.requests, self.output)


Limit = Rate | Concurrency | TokenRate


def checked_limits(limits: object) -> dict[str, Limit]:
    """``Cairn(limits=...)`` checked: names are non-empty text, values are limits."""
    if limits is None:
        return {}
    if not isinstance(limits, Mapping):
        raise ConfigurationError(
            f"limits must be a dict of name -> Rate(...) or Concurrency(...), not {limits!r}"
        )
    checked: dict[str, Limit] = {}
    for name, limit in limits.items():
        if not (isinstance(name, str) and name.strip()):
            raise ConfigurationError(f"limit names must be non-empty text, not {name!r}")
        check_name("limit name", name)
        if not isinstance(limit, Rate | Concurrency | TokenRate):
            raise ConfigurationError(
                f"limit {name!r} is {limit!r}; declare it as cairn.Rate(count, per=seconds), "
                "cairn.Concurrency(n) or cairn.TokenRate(tokens, per=seconds, requests=n)"
            )
        checked[name] = limit
    return checked


@dataclass(frozen=True, slots=True)
class LimitBook:
    """The limits a running task may use, and who holds its permits."""

    limits: Mapping[str, Limit]
    owner: str
    lease: timedelta

    def get(self, name: str) -> Limit:
        """The limit called ``name``; ConfigurationError naming the known ones if none."""
        limit = self.limits.get(name)
        if limit is None:
            known = ", ".join(repr(n) for n in sorted(self.limits)) or "none"
            raise ConfigurationError(
                f"no limit named {name!r} is declared on this app (declared: {known}). "
                f"Declare it, e.g. Cairn(limits={{{name!r}: Rate(10, per=60)}}), or fix "
                "the step's limit= name."
            )
        return limit

    def for_model(
        self, provider: str, model: str, named: str | None
    ) -> tuple[str, TokenRate] | None:
        """The token limit a model call counts against, and its name in the store:
        the one it names (``limit=``), else one declared as ``"provider:model"``,
        else one declared as ``"provider"``, counted apart for each model (as
        providers count). None when none applies."""
        if named is not None:
            limit = self.get(named)
            if not isinstance(limit, TokenRate):
                raise ConfigurationError(
                    f"limit {named!r} is {limit!r}; a model call's limit= must name a "
                    "cairn.TokenRate(tokens, per=seconds, requests=n)"
                )
            return named, limit
        exact = f"{provider}:{model}"
        for declared in (exact, provider):
            found = self.limits.get(declared)
            if isinstance(found, TokenRate):
                return exact, found
        return None


NO_LIMITS = LimitBook({}, "", timedelta(seconds=30))
