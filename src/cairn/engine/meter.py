"""A model call metered in tokens and dollars: its budgets and its token limit.

``ctx.llm``, ``ctx.llm_call`` and the integrations' model calls hand the step
machine a ``Meter`` in place of a limit's name. Around each call (each try of
it, a retry included) the machine:

1. asks the meter what the call needs: its prompt's tokens plus its
   ``max_tokens``, and that worst case's price (None: nothing will be sent,
   a replay that finds the answer stored);
2. reserves the price and the tokens on the call's budgets
   (``cairn.engine.budgets``; a refusal parks the task, nothing is sent);
3. reserves the tokens and one request of the call's ``TokenRate``
   (``cairn.engine.permits``; ``Wait`` while there is no room, no attempt spent);
4. makes the call, then settles both to the usage the provider reported.

A call that raises gives back its budget reservation (a provider does not bill
an error) but keeps its token reservation for the window (its request may have
counted). A ``RetryAfter`` (HTTP 429) also closes the token limit for everyone
for the time the provider asked; so does an answer whose rate-limit headers say
the provider has less room left than this call needed (``provider_wait``:
``cairn.agent.rate_headers``), until the provider's reset.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cairn.engine import budgets, permits
from cairn.engine.run import Call, Machine
from cairn.errors import RetryAfter
from cairn.limits import TokenRate

if TYPE_CHECKING:
    from cairn.engine.run import TaskRun


@dataclass(frozen=True, slots=True)
class Usage:
    """What a model call needs (before) or used (after): tokens, and nano-dollars."""

    tokens: int
    usd_nanos: int


@dataclass(frozen=True, slots=True)
class Meter:
    """How one model call is metered (see the module doc): ``need`` is asked
    right before each try, ``used`` reads the returned value; ``rate`` is the
    token limit it counts against, with its name in the store, if any."""

    need: Callable[[], Usage | None]
    used: Callable[[Any], Usage]
    rate: tuple[str, TokenRate] | None
    # After a call that needed so many tokens: how long the provider's answer
    # says nobody should send another (None: it has room, or did not say).
    provider_wait: Callable[[int], float | None] | None = None


def metered(run: TaskRun, meter: Meter, call: Call) -> Machine[Any]:
    """``call`` with its budgets and token limit reserved around it."""
    need = meter.need()
    if need is None:
        return (yield call)
    hold = budgets.reserve(run, need.usd_nanos, need.tokens)
    permit = None
    try:
        if meter.rate is not None:
            name, rate = meter.rate
            permit = yield from permits.acquire_tokens(run, name, rate, need.tokens)
        value = yield call
    except RetryAfter as exc:
        if meter.rate is not None:
            permits.close(run, meter.rate[0], exc.seconds)
        _ended(run, permit, hold, None)
        raise
    except Exception:
        _ended(run, permit, hold, None)
        raise
    except BaseException:
        # Killed, cancelled, lease lost: the request may have been billed.
        _ended(run, permit, hold, need)
        raise
    _ended(run, permit, hold, meter.used(value), settled=True)
    if meter.rate is not None and meter.provider_wait is not None:
        wait = meter.provider_wait(need.tokens)
        if wait is not None:
            permits.close(run, meter.rate[0], wait)
    return value


def _ended(
    run: TaskRun,
    permit: permits.Permit | None,
    hold: budgets.Hold | None,
    used: Usage | None,
    *,
    settled: bool = False,
) -> None:
    if permit is not None:
        if settled and used is not None:
            permits.settle(run, permit, used.tokens)
        else:
            permits.release(run, permit)
    if hold is not None:
        spent = used or Usage(0, 0)
        budgets.settle(run, hold, spent.usd_nanos, spent.tokens)
