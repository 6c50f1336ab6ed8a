"""One engine for sync and async code: machines that yield effects, two drivers.

cairn's logic for a step, a recorded input or a whole task is written once, as a
generator. It never calls user code or sleeps itself: it *yields* a ``Call`` or a
``Wait`` and receives the outcome. ``drive`` performs effects synchronously;
``adrive`` awaits them. Each driver is a dozen lines, so the two edges cannot
drift apart the way hand-kept twin engines do.

Only ``Exception`` is thrown back into a machine. ``BaseException`` (lease lost,
cancellation, KeyboardInterrupt) passes straight through to the caller, after
the machine is closed so its ``finally`` blocks run.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Callable, Generator
from contextvars import ContextVar
from typing import Any, NamedTuple, TypeVar

from cairn.clock import Clock

T = TypeVar("T")


# NamedTuples, not frozen dataclasses: one is made per step, and a frozen
# dataclass's __init__ costs about a microsecond more on that path.
class Call(NamedTuple):
    """Call user code; the machine receives its return value or its exception.

    ``inside`` names the history entry whose work the call is, as (the task's
    run, a label): set while the call runs, so a ``ctx`` call from inside it (a
    step inside a step) is caught at once (``TaskRun.replayed``)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    inside: tuple[object, object] | None = None


# The entry whose function is running in this thread or coroutine, if any.
inside_call: ContextVar[tuple[object, object] | None] = ContextVar(
    "cairn_inside_call", default=None
)


class Wait(NamedTuple):
    """Wait this many seconds (retry backoff, durable sleep)."""

    seconds: float


Effect = Call | Wait
Machine = Generator[Effect, Any, T]


def in_event_loop() -> bool:
    """True when called from a coroutine (a running event loop in this thread):
    the sync-or-async question for calls that take no function to look at."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def drive(machine: Machine[T], clock: Clock) -> T:
    """Run ``machine`` to its end in the calling thread."""
    value: Any = None
    error: Exception | None = None
    while True:
        try:
            effect = machine.send(value) if error is None else machine.throw(error)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        value, error = None, None
        if isinstance(effect, Wait):
            clock.sleep(effect.seconds)
            continue
        token = None if effect.inside is None else inside_call.set(effect.inside)
        try:
            value = effect.fn(*effect.args, **effect.kwargs)
        except Exception as exc:  # noqa: BLE001 - handed to the machine, which decides
            error = exc
        except BaseException:
            _close(machine)
            raise
        finally:
            if token is not None:
                inside_call.reset(token)


async def adrive(machine: Machine[T], clock: Clock) -> T:
    """Run ``machine`` to its end, awaiting calls that return awaitables."""
    value: Any = None
    error: Exception | None = None
    while True:
        try:
            effect = machine.send(value) if error is None else machine.throw(error)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        value, error = None, None
        if isinstance(effect, Wait):
            await clock.asleep(effect.seconds)
            continue
        token = None if effect.inside is None else inside_call.set(effect.inside)
        try:
            value = effect.fn(*effect.args, **effect.kwargs)
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:  # noqa: BLE001 - handed to the machine, which decides
            error = exc
        except BaseException:
            _close(machine)
            raise
        finally:
            if token is not None:
                inside_call.reset(token)


def _close(machine: Machine[Any]) -> None:
    """Run the machine's ``finally`` blocks now (a shared-limit permit is given
    back at once) when a ``BaseException`` passes through user code, rather than
    whenever the generator is collected. Nothing it raises may hide the original."""
    with contextlib.suppress(Exception):
        machine.close()
