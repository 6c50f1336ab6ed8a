"""Shared limits: how often, or how many at once, steps may call a named resource.

Declared once on the app, used by steps::

    app = Cairn(limits={"ads-api": Rate(10, per=60), "db": Concurrency(4)})
    ctx.step("fetch", fetch_ads, account, limit="ads-api")

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


Limit = Rate | Concurrency


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
        if not isinstance(limit, Rate | Concurrency):
            raise ConfigurationError(
                f"limit {name!r} is {limit!r}; declare it as cairn.Rate(count, per=seconds) "
                "or cairn.Concurrency(n)"
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


NO_LIMITS = LimitBook({}, "", timedelta(seconds=30))
