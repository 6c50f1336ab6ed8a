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

A ``Rate`` or ``Concurrency`` with ``key=`` is counted apart for each key (a
tenant): its permits are stored as ``"name<US>key"`` and counted alone, under
the lock of the limit's own row (``LimitBook.keyed``; docs/limits.md, "Keyed
limits").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from cairn.errors import ConfigurationError, InvalidName
from cairn.names import check_name

# Where a keyed limit's key comes from: the name of one of the task's arguments,
# or a function of the task's arguments (a dict by name) that returns the key.
KeyFrom = str | Callable[[Mapping[str, Any]], object]

# What a step's ``limit=`` names: a limit, or a keyed limit and the key to count
# this call under (``limit=("api", tenant)``).
LimitRef = str | tuple[str, object]

# A key is stored in the permit's limit name, after the limit's own name and
# this separator (which no declared limit name may hold): ``"api\x1ftenant-a"``.
KEY_SEPARATOR = "\x1f"
# Bytes a key may have in UTF-8: room for the limit name and the permit id in
# one index entry, and short enough to show.
KEY_LIMIT_BYTES = 200


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
    """At most ``count`` calls in any ``per`` seconds (a number or a timedelta).

    With ``key``, counted apart for each key: ``Rate(10, per=60, key="tenant")``
    lets each tenant make 10 calls a minute (see ``Concurrency`` for the key)."""

    __slots__ = ("count", "key", "per")

    def __init__(
        self, count: int, per: float | timedelta = 60.0, *, key: KeyFrom | None = None
    ) -> None:
        what = f"Rate({count!r}, per={per!r})"
        self.count = _whole(count, what, "count")
        self.per = _seconds(per, what)
        self.key = _key_from(key, what)

    @property
    def capacity(self) -> int:
        return self.count

    @property
    def window(self) -> timedelta:
        return timedelta(seconds=self.per)

    def __repr__(self) -> str:
        return f"Rate({self.count}, per={self.per:g}{_shown_key(self.key)})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Rate) and (self.count, self.per, self.key) == (
            other.count,
            other.per,
            other.key,
        )

    def __hash__(self) -> int:
        return hash((Rate, self.count, self.per, self.key))


class Concurrency:
    """At most ``n`` calls running at once.

    With ``key``, at most ``n`` at once *for each key*: ``Concurrency(2,
    key="tenant")`` takes the key from the task's argument ``tenant``;
    ``key=lambda args: args["account"]["id"]`` computes it from the task's
    arguments (a dict by name); a step may also set it, ``ctx.step("call", fn,
    limit=("api", tenant))``. A key is text (or a whole number), at most
    ``KEY_LIMIT_BYTES`` bytes, with no NUL."""

    __slots__ = ("key", "n")

    def __init__(self, n: int, *, key: KeyFrom | None = None) -> None:
        self.n = _whole(n, f"Concurrency({n!r})", "n")
        self.key = _key_from(key, f"Concurrency({n!r})")

    @property
    def capacity(self) -> int:
        return self.n

    @property
    def window(self) -> timedelta:
        return timedelta(0)

    def __repr__(self) -> str:
        return f"Concurrency({self.n}{_shown_key(self.key)})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Concurrency) and (self.n, self.key) == (other.n, other.key)

    def __hash__(self) -> int:
        return hash((Concurrency, self.n, self.key))


def _key_from(key: object, what: str) -> KeyFrom | None:
    if key is None or callable(key):
        return key
    if isinstance(key, str) and key.isidentifier():
        return key
    raise ConfigurationError(
        f'{what}: key must name one of the task\'s arguments (e.g. key="tenant") or '
        f'be a function of the task\'s arguments (e.g. key=lambda args: args["tenant"]), '
        f"not {key!r}"
    )


def _shown_key(key: KeyFrom | None) -> str:
    if key is None:
        return ""
    return f", key={key!r}" if isinstance(key, str) else f", key={getattr(key, '__name__', key)}"


def checked_key(limit: str, key: object) -> str:
    """``key`` as limit ``limit`` stores it: text of at most ``KEY_LIMIT_BYTES``
    bytes without NUL (a whole number is written out); InvalidName otherwise."""
    if isinstance(key, int) and not isinstance(key, bool):
        key = str(key)
    if not isinstance(key, str):
        raise InvalidName(
            f"the key of limit {limit!r} must be text or a whole number, not "
            f"{type(key).__name__} ({key!r}). Make the task argument (or the key "
            "function) give the tenant's id as text. Nothing was written.",
            kind="limit key",
            value=repr(key),
        )
    return check_name(f"key of limit {limit!r}", key, max_bytes=KEY_LIMIT_BYTES)


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
        if KEY_SEPARATOR in name:
            raise ConfigurationError(
                f"limit name {name!r} holds the unit separator ('\\x1f'), which cairn "
                "puts between a keyed limit's name and its key; remove it"
            )
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

    def keyed(
        self, name: str, args: Mapping[str, Any], key: object | None = None
    ) -> tuple[str, Limit, str | None]:
        """Limit ``name`` as one call counts against it: the name its permits are
        stored under, the limit, and (keyed) the declared name whose row the
        acquire locks. The key is ``key`` (set by the step), else the limit's own
        ``key=`` applied to the task's arguments ``args``."""
        limit = self.get(name)
        declared = None if isinstance(limit, TokenRate) else limit.key
        if declared is None:
            if key is not None:
                raise ConfigurationError(
                    f"the step gives limit {name!r} a key ({key!r}), but {limit!r} is not "
                    f'keyed: declare it with key=, e.g. Concurrency(2, key="tenant")'
                )
            return name, limit, None
        if key is None:
            key = _key_of(name, declared, args)
        return f"{name}{KEY_SEPARATOR}{checked_key(name, key)}", limit, name

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


def split_ref(ref: object) -> tuple[str, object | None]:
    """A step's ``limit=`` as (limit name, key set by the step or None)."""
    if isinstance(ref, str):
        return ref, None
    if isinstance(ref, tuple) and len(ref) == 2 and isinstance(ref[0], str):
        return ref[0], ref[1]
    raise ConfigurationError(
        f'limit= must name a limit (limit="api") or a keyed limit and its key '
        f'(limit=("api", tenant)), not {ref!r}'
    )


def _key_of(name: str, declared: KeyFrom, args: Mapping[str, Any]) -> object:
    """The key limit ``name`` declared (``key=``) finds in the task's ``args``."""
    if isinstance(declared, str):
        if declared not in args:
            known = ", ".join(repr(a) for a in sorted(args)) or "none"
            raise ConfigurationError(
                f"limit {name!r} takes its key from the task argument {declared!r}, "
                f"which this task was not given (its arguments: {known}). Give the "
                f"task that argument, or set the key in the step: limit=({name!r}, key)"
            )
        return args[declared]
    try:
        return declared(args)
    except Exception as exc:
        raise ConfigurationError(
            f"the key function of limit {name!r} raised {type(exc).__name__}: {exc} "
            "(it is called with the task's arguments, a dict by name)"
        ) from exc


NO_LIMITS = LimitBook({}, "", timedelta(seconds=30))
