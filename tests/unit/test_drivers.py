"""The effect drivers: a machine yields Call and Wait, and a driver carries them out."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

import pytest

from cairn.clock import FakeClock
from cairn.engine.run import Call, Machine, Wait, adrive, drive


class Stop(BaseException):
    """A BaseException of the test's own, standing for KeyboardInterrupt or LeaseLost."""


def add(a: int, b: int) -> int:
    return a + b


async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)  # real-sleep-ok: a zero yield to the event loop
    return a + b


def explode(message: str) -> None:
    raise ValueError(message)


def machine(adder: Callable[..., Any], log: list[str]) -> Machine[tuple[Any, ...]]:
    """A tiny machine: one call, one caught error, one wait, then a result."""
    total = yield Call(adder, (2,), {"b": 3})
    try:
        yield Call(explode, ("bad input",), {})
    except ValueError as exc:
        log.append(f"caught {exc}")
    yield Wait(2.5)
    return ("done", total)


def stopped(log: list[str]) -> Machine[None]:
    """A machine whose call raises a BaseException, which it must never see."""
    try:
        yield Call(_raise_stop, (), {})
    except BaseException as exc:  # the driver must not throw this in
        log.append(f"machine saw {type(exc).__name__}")
        raise
    log.append("machine carried on")


def _raise_stop() -> None:
    raise Stop("stop now")


def test_drive_delivers_values_errors_and_waits() -> None:
    """drive sends a call's value back in, throws its Exception into the machine, sleeps
    a Wait on the clock, and returns the machine's return value."""
    clock, log = FakeClock(), list[str]()
    assert drive(machine(add, log), clock) == ("done", 5)
    assert log == ["caught bad input"]
    assert clock.slept == [2.5]


def test_adrive_awaits_awaitables_and_delivers_the_rest() -> None:
    """adrive awaits a call that returns an awaitable, passes plain values through, and
    otherwise behaves as drive does."""
    for adder in (async_add, add):
        clock, log = FakeClock(), list[str]()
        assert asyncio.run(adrive(machine(adder, log), clock)) == ("done", 5)
        assert log == ["caught bad input"]
        assert clock.slept == [2.5]


def test_uncaught_error_leaves_the_driver() -> None:
    """An Exception the machine does not catch propagates out of the driver."""

    def unguarded() -> Machine[None]:
        yield Call(explode, ("nobody catches me",), {})

    with pytest.raises(ValueError, match="nobody catches me"):
        drive(unguarded(), FakeClock())
    with pytest.raises(ValueError, match="nobody catches me"):
        asyncio.run(adrive(unguarded(), FakeClock()))


def test_base_exception_passes_through_both_drivers_untouched() -> None:
    """A BaseException raised by a call leaves drive (and adrive) as the same
    object and is never thrown into the machine: the machine is only closed, so
    its finally blocks run (GeneratorExit), and it cannot carry on."""
    for run in (drive, lambda gen, clock: asyncio.run(adrive(gen, clock))):
        log: list[str] = []
        gen = stopped(log)
        with pytest.raises(Stop) as raised:
            run(gen, FakeClock())
        assert str(raised.value) == "stop now"
        assert log == ["machine saw GeneratorExit"]
        assert inspect.getgeneratorstate(gen) == inspect.GEN_CLOSED


def test_machine_with_no_effects_returns_at_once() -> None:
    """A machine that returns before yielding anything (a replayed step) gives its
    value straight back without touching the clock."""

    def replayed() -> Machine[str]:
        return "recorded"
        yield  # pragma: no cover - makes this a generator

    clock = FakeClock()
    assert drive(replayed(), clock) == "recorded"
    assert asyncio.run(adrive(replayed(), clock)) == "recorded"
    assert clock.slept == []
