"""Recorded inputs: time, ids, random values, windows and sleeps are the same on replay.

Every test that uses a store runs on SQLite and on PostgreSQL (``store_url``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest

from cairn import Cairn, Context, Retry
from cairn.clock import FakeClock
from cairn.testing import set_fault_hook
from tests.crashes import (
    LEASE,
    PAST_LEASE,
    Crash,
    CrashingClock,
    crash_before,
    logged,
    second_process,
)
from tests.crashes import url as url  # a fixture: pytest finds it by this name


@pytest.fixture
def first(url: str, clock: FakeClock) -> Iterator[Cairn]:
    """The app of the first process, with a short lease so tests can expire it."""
    with Cairn(url, clock=clock, lease=LEASE) as app:
        yield app


def test_recorded_inputs_are_identical_on_replay(first: Cairn, url: str, clock: FakeClock) -> None:
    """ctx.now() (tz-aware), ctx.uuid(), ctx.random() and ctx.record() give the resumed
    run exactly what the crashed run saw, though the clock moved on; the recorded
    function is called once across both runs."""
    seen: list[tuple[datetime, uuid.UUID, float, list[str]]] = []
    window_calls: list[datetime] = []

    def window() -> list[str]:
        window_calls.append(clock.now())
        start = clock.now() - timedelta(days=1)
        return [start.isoformat(), clock.now().isoformat()]

    def report(ctx: Context) -> str:
        inputs = (ctx.now(), ctx.uuid(), ctx.random(), ctx.record("window", window))
        seen.append(inputs)
        ctx.step("publish", lambda: None)
        return f"{inputs[1]}"

    first.task(name="report")(report)
    set_fault_hook(first, crash_before("publish"))
    with pytest.raises(Crash):
        first.run(first.registered("report"), task_id="r")

    clock.advance(LEASE + 3600)
    with second_process(url, clock) as other:
        result = other.run(other.task(name="report")(report), task_id="r")

    first_seen, replayed = seen
    assert replayed == first_seen
    now, ident, rand, _ = first_seen
    assert now.tzinfo is not None
    assert now.utcoffset() == timedelta(0)
    assert now == datetime(2026, 5, 24, tzinfo=now.tzinfo)
    assert type(ident) is uuid.UUID
    assert type(rand) is float
    assert 0.0 <= rand < 1.0
    assert len(window_calls) == 1
    assert result == str(ident)


def test_recorded_inputs_are_rows_of_kind_input(first: Cairn) -> None:
    """Each recorded input takes its own history position, as an 'input' row named
    after what was recorded."""

    @first.task(name="inputs")
    def inputs(ctx: Context) -> None:
        ctx.now()
        ctx.uuid()
        ctx.random()
        ctx.record("window", lambda: [1, 2])

    first.run(inputs, task_id="i")
    history = first.store.load_history("i")
    assert [(s.seq, s.kind, s.name) for s in history.values()] == [
        (1, "input", "now"),
        (2, "input", "uuid"),
        (3, "input", "random"),
        (4, "input", "window"),
    ]


def test_recorded_input_error_is_not_retried_by_the_step_policy(url: str, clock: FakeClock) -> None:
    """ctx.record is never retried by the app's step policy: its error fails the task
    attempt, keeps no value, and the next task attempt calls the function again."""
    calls: list[int] = []

    def token() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("auth server down")
        return "tok-2"

    eager_steps = Retry(attempts=5, initial_delay=7, jitter=0)
    one_task_retry = Retry(attempts=2, initial_delay=1, jitter=0)
    with Cairn(url, clock=clock, step_retry=eager_steps, task_retry=one_task_retry) as app:

        @app.task(name="login")
        def login(ctx: Context) -> str:
            return ctx.record("token", token)

        assert app.run(login, task_id="l") == "tok-2"
        (row,) = app.store.load_history("l").values()

    assert calls == [1, 1]
    assert clock.slept == [1.0]  # the task's retry wait, never the step policy's 7 s
    assert (row.kind, row.status, row.task_attempt) == ("input", "completed", 2)


def test_sleep_records_its_wake_time(first: Cairn, clock: FakeClock) -> None:
    """ctx.sleep(seconds) waits that long on the app's clock and records the wake-up
    time as a 'sleep' row; running the finished task again does not sleep."""

    @first.task(name="nap")
    def nap(ctx: Context) -> str:
        ctx.sleep(90)
        return "rested"

    start = clock.now()
    assert first.run(nap, task_id="nap") == "rested"
    assert first.run(nap, task_id="nap") == "rested"

    assert clock.slept == [90.0]
    (row,) = first.store.load_history("nap").values()
    assert (row.kind, row.name, row.status) == ("sleep", "sleep", "completed")
    assert row.output is not None
    assert datetime.fromisoformat(row.output) == start + timedelta(seconds=90)


def test_resumed_task_sleeps_only_what_is_left(url: str) -> None:
    """After a crash 40 s into a 100 s durable sleep, and downtime until another
    process may take the task over, the resumed task sleeps only what is left of
    the 100 s, then carries on."""
    clock = CrashingClock()
    calls: list[str] = []

    def nap(ctx: Context) -> str:
        ctx.sleep(100)
        return ctx.step("wake", logged(calls, "wake", "awake"))

    with Cairn(url, clock=clock, lease=LEASE) as app:
        app.task(name="nap")(nap)
        clock.crash_after = 40
        with pytest.raises(Crash):
            app.run(app.registered("nap"), task_id="nap")
    assert calls == []

    clock.advance(PAST_LEASE)
    with second_process(url, clock) as other:
        assert other.run(other.task(name="nap")(nap), task_id="nap") == "awake"

    assert clock.slept == [40.0, pytest.approx(100 - 40 - PAST_LEASE)]
    assert calls == ["wake"]


def test_sleep_already_over_on_resume_does_not_wait(url: str) -> None:
    """A task resumed after its recorded wake-up time has passed does not sleep again."""
    clock = CrashingClock()

    def nap(ctx: Context) -> int:
        ctx.sleep(5)
        return 1

    with Cairn(url, clock=clock, lease=LEASE) as app:
        app.task(name="nap")(nap)
        clock.crash_after = 1
        with pytest.raises(Crash):
            app.run(app.registered("nap"), task_id="nap")

    clock.advance(PAST_LEASE)
    with second_process(url, clock) as other:
        assert other.run(other.task(name="nap")(nap), task_id="nap") == 1
    assert clock.slept == [1.0]
