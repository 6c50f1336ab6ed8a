"""Taking and giving back a shared limit's permits, around one step's call.

The limits themselves (``Rate``, ``Concurrency``, the app's ``LimitBook``) are
plain values in ``cairn.limits``; this module is the part that talks to the
store, as a machine that yields ``Wait`` while there is no room. A token
limit's permit holds an amount: reserved before the call, settled to what the
provider reported after it (``settle``); a provider's 429 closes the limit for
everyone (``close``).
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from cairn.engine.run import Machine, Wait
from cairn.errors import Permanent
from cairn.limits import KEY_SEPARATOR, Concurrency, TokenRate

if TYPE_CHECKING:
    from cairn.engine.run import TaskRun

# A full limit whose permits are held by running calls is asked again after this
# many seconds, doubling up to the cap: any of those calls may end at any moment.
FIRST_POLL = 0.01
MAX_POLL = 0.25
# Up to this fraction is added to every poll, so that many waiters do not all ask
# again in the same instant.
POLL_JITTER = 0.2


# A keyed limit's spent permits of every key are dropped by an acquire of any key
# at most once in this many seconds (or its window, if longer) in a process: a
# key used once leaves its rows for at most that long after they stop counting.
SWEEP_EVERY = 60.0
# When (time.monotonic) each keyed limit was last swept by this process. A race
# between threads only sweeps twice, which is harmless.
_swept: dict[str, float] = {}


@dataclass(frozen=True, slots=True)
class Permit:
    limit: str
    permit: str
    # A keyed concurrency limit's permit: deleted when its call ends.
    forget: bool = False


def acquire(run: TaskRun, name: str, key: object | None = None) -> Machine[Permit]:
    """Take a permit of limit ``name`` (for ``key``, or the key its ``key=``
    finds in the task's arguments, if it is keyed), yielding ``Wait`` while
    there is no room."""
    stored, limit, lock_row = run.limits.keyed(name, run.args, key)
    if lock_row is None:
        return (yield from _taken(run, name, limit.capacity, limit.window, 0, None))
    forget = isinstance(limit, Concurrency)
    permit = Permit(stored, uuid.uuid4().hex, forget)
    return (yield from _waited(run, permit, limit.capacity, limit.window, 0, None, lock_row))


def _sweep_due(name: str, window: timedelta) -> str | None:
    """The prefix of limit ``name``'s keyed permits if this process should drop
    their spent rows now, else None."""
    now = time.monotonic()
    if now < _swept.get(name, float("-inf")) + max(SWEEP_EVERY, window.total_seconds()):
        return None
    _swept[name] = now
    return name + KEY_SEPARATOR


def acquire_tokens(run: TaskRun, name: str, rate: TokenRate, tokens: int) -> Machine[Permit]:
    """Reserve ``tokens`` of token limit ``rate`` (stored as ``name``) and one of
    its requests, yielding ``Wait`` while there is no room (or it is closed)."""
    if tokens > rate.tokens:
        raise Permanent(
            f"this model call needs {tokens} tokens (its prompt plus max_tokens), more "
            f"than limit {name!r} ({rate!r}) allows in a window: lower max_tokens, "
            "shorten the prompt, or raise the limit's tokens"
        )
    return (yield from _taken(run, name, rate.capacity, rate.window, tokens, rate.tokens))


def _taken(
    run: TaskRun,
    name: str,
    capacity: int,
    window: timedelta,
    amount: int,
    amount_capacity: int | None,
) -> Machine[Permit]:
    permit = Permit(name, uuid.uuid4().hex)
    return (yield from _waited(run, permit, capacity, window, amount, amount_capacity, None))


def _waited(
    run: TaskRun,
    permit: Permit,
    capacity: int,
    window: timedelta,
    amount: int,
    amount_capacity: int | None,
    lock_row: str | None,
) -> Machine[Permit]:
    poll = FIRST_POLL
    while True:
        now = run.now()
        refused = run.store.acquire_permit(
            permit.limit,
            capacity,
            window,
            permit.permit,
            run.limits.owner,
            run.task_id,
            now,
            now + run.limits.lease,
            amount=amount,
            amount_capacity=amount_capacity,
            lock_row=lock_row,
            sweep=None if lock_row is None else _sweep_due(lock_row, window),
        )
        if refused is None:
            return permit
        # An ended permit stops counting at a known time: wait exactly that (and
        # a hair more, so waiters do not all ask in the same instant). A held one
        # may end at any moment, so it is polled for, more slowly as time passes.
        if refused.held == 0 and refused.frees_at is not None:
            wait = max(0.0, (refused.frees_at - now).total_seconds())
            wait += random.random() * FIRST_POLL
        else:
            wait = poll
            if refused.frees_at is not None:
                wait = min(wait, max(0.0, (refused.frees_at - now).total_seconds()))
            wait *= 1 + random.random() * POLL_JITTER
            poll = min(poll * 2, MAX_POLL)
        yield Wait(wait)


def release(run: TaskRun, permit: Permit) -> None:
    """The call that held ``permit`` ended, however it ended."""
    run.store.release_permit(permit.limit, permit.permit, run.now(), forget=permit.forget)


def settle(run: TaskRun, permit: Permit, tokens: int) -> None:
    """The call that held ``permit`` ended having used ``tokens``: the rest of its
    reservation is free at once."""
    run.store.settle_permit(permit.limit, permit.permit, tokens, run.now())


def close(run: TaskRun, name: str, seconds: float) -> None:
    """The provider said to wait ``seconds`` (HTTP 429, or its rate-limit headers):
    nobody on the store gets a permit of ``name`` before then."""
    run.store.close_limit(name, run.now() + timedelta(seconds=seconds))
