"""Replay: a task runs again from the top, and recorded steps return their recorded values.

Every test that uses a store runs on SQLite and on PostgreSQL (``store_url``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import cairn
from cairn import Cairn, CodecError, Context, NonDeterminismError, Retry, TaskBusy, TaskFailed
from cairn.clock import FakeClock
from cairn.store import admin
from cairn.testing import set_fault_hook
from tests.crashes import LEASE, PAST_LEASE, Crash, crash_before, logged, second_process
from tests.crashes import url as url  # a fixture: pytest finds it by this name


@dataclass(frozen=True)
class Quote:
    symbol: str
    price: float
    at: datetime


@pytest.fixture
def first(url: str, clock: FakeClock) -> Iterator[Cairn]:
    """The app of the first process, with a short lease so tests can expire it."""
    with Cairn(url, clock=clock, lease=LEASE) as app:
        yield app


def counting_pipeline(calls: list[str]) -> Callable[..., list[int]]:
    """A five-step task function that logs each step function it calls."""

    def pipeline(ctx: Context, start: int) -> list[int]:
        values = [start]
        for name in ("one", "two", "three", "four", "five"):
            previous = values[-1]
            values.append(ctx.step(name, logged(calls, name, previous + 1)))
        return values

    return pipeline


def test_completed_task_returns_recorded_result_without_calling_anything(first: Cairn) -> None:
    """Running a finished task again with the same id returns the recorded result and
    calls neither the task function nor any step."""
    calls: list[str] = []
    entered: list[int] = []
    pipeline = counting_pipeline(calls)

    @first.task(name="pipeline")
    def task(ctx: Context, start: int) -> list[int]:
        entered.append(start)
        return pipeline(ctx, start)

    assert first.run(task, task_id="t1", start=1) == [1, 2, 3, 4, 5, 6]
    assert first.run(task, task_id="t1", start=1) == [1, 2, 3, 4, 5, 6]
    assert calls == ["one", "two", "three", "four", "five"]
    assert entered == [1]


def test_crash_before_step_three_resumes_at_step_three(
    first: Cairn, url: str, clock: FakeClock
) -> None:
    """After a crash just before step 3, the resumed run calls only steps 3 onwards and
    returns what a clean run returns."""
    calls: list[str] = []
    first.task(name="pipeline")(counting_pipeline(calls))
    clean = first.run(first.registered("pipeline"), task_id="clean", start=1)
    calls.clear()

    set_fault_hook(first, crash_before(3))
    with pytest.raises(Crash):
        first.run(first.registered("pipeline"), task_id="crashed", start=1)
    assert calls == ["one", "two"]
    assert first.store.get_task("crashed").status == "running"  # type: ignore[union-attr]

    clock.advance(PAST_LEASE)
    with second_process(url, clock) as other:
        resumed_task = other.task(name="pipeline")(counting_pipeline(calls))
        assert other.run(resumed_task, task_id="crashed", start=1) == clean
    assert calls == ["one", "two", "three", "four", "five"]


def test_task_under_a_live_lease_is_not_taken_by_another_owner(
    first: Cairn, url: str, clock: FakeClock
) -> None:
    """While the crashed run's lease has not expired, another owner gets TaskBusy and
    nothing runs; once it expired, that owner takes the task over."""
    calls: list[str] = []
    first.task(name="pipeline")(counting_pipeline(calls))
    set_fault_hook(first, crash_before(2))
    with pytest.raises(Crash):
        first.run(first.registered("pipeline"), task_id="held", start=0)

    with second_process(url, clock) as other:
        task = other.task(name="pipeline")(counting_pipeline(calls))
        with pytest.raises(TaskBusy) as busy:
            other.run(task, task_id="held", start=0)
        assert busy.value.task_id == "held"
        assert calls == ["one"]
        clock.advance(PAST_LEASE)
        assert other.run(task, task_id="held", start=0) == [0, 1, 2, 3, 4, 5]


def test_step_values_keep_their_type_on_first_run_and_on_replay(
    first: Cairn, url: str, clock: FakeClock
) -> None:
    """A step returning a dataclass, a tz-aware datetime or a tuple hands back that same
    type with the same value, on the first run and on replay."""
    seen: list[tuple[Any, Any, Any]] = []
    moment = datetime(2026, 5, 24, 9, 30, tzinfo=timezone(timedelta(hours=2)))

    def typed(ctx: Context) -> str:
        quote = ctx.step("quote", lambda: Quote("ACME", 12.5, moment))
        when = ctx.step("when", lambda: moment)
        pair = ctx.step("pair", lambda: ("a", 1))
        seen.append((quote, when, pair))
        ctx.step("last", lambda: None)
        return "done"

    first.task(name="typed")(typed)
    set_fault_hook(first, crash_before(4))
    with pytest.raises(Crash):
        first.run(first.registered("typed"), task_id="typed")
    clock.advance(PAST_LEASE)
    with second_process(url, clock) as other:
        assert other.run(other.task(name="typed")(typed), task_id="typed") == "done"

    assert len(seen) == 2
    for quote, when, pair in seen:
        assert type(quote) is Quote
        assert quote == Quote("ACME", 12.5, moment)
        assert type(when) is datetime
        assert when == moment
        assert when.utcoffset() == timedelta(hours=2)
        assert type(pair) is tuple
        assert pair == ("a", 1)


def test_changed_step_name_raises_non_determinism_and_overwrites_nothing(
    first: Cairn, url: str, clock: FakeClock
) -> None:
    """When the code asks for another step name at a recorded position, the task fails
    with NonDeterminismError naming the task, position, recorded and current names,
    without retrying, and the recorded history stays exactly as it was."""

    def version_one(ctx: Context) -> str:
        ctx.step("fetch", lambda: "page")
        ctx.step("analyze", lambda: "verdict")
        return ctx.step("apply", lambda: "applied")

    def version_two(ctx: Context) -> str:
        ctx.step("fetch", lambda: "page")
        ctx.step("summarize", lambda: "summary")
        return ctx.step("apply", lambda: "applied")

    first.task(name="review")(version_one)
    set_fault_hook(first, crash_before(3))
    with pytest.raises(Crash):
        first.run(first.registered("review"), task_id="rev-1")
    before = first.store.load_history("rev-1")
    assert [step.name for step in before.values()] == ["fetch", "analyze"]

    clock.advance(PAST_LEASE)
    with second_process(url, clock) as other:
        changed = other.task(name="review", retry=Retry(attempts=3, jitter=0))(version_two)
        with pytest.raises(TaskFailed) as failed:
            other.run(changed, task_id="rev-1")
        after = other.store.load_history("rev-1")
        row = other.store.get_task("rev-1")

    cause = failed.value.__cause__
    assert isinstance(cause, NonDeterminismError)
    assert (cause.task_id, cause.seq) == ("rev-1", 2)
    assert "analyze" in cause.recorded
    assert "summarize" in cause.current
    for part in ("'rev-1'", "position 2", "analyze", "summarize"):
        assert part in str(cause)
    assert failed.value.error["type"] == "cairn.errors.NonDeterminismError"
    assert after == before
    assert row is not None
    assert row.status == "failed"
    assert row.attempts == 1


def test_unencodable_step_output_fails_task_naming_step_and_type(first: Cairn) -> None:
    """A step whose output the codec cannot encode fails the task with a CodecError that
    names the step and the type, and leaves no row for that step."""

    @first.task(name="leaky")
    def leaky(ctx: Context) -> None:
        ctx.step("fine", lambda: 1)
        ctx.step("grab_lock", threading.Lock)

    with pytest.raises(TaskFailed) as failed:
        first.run(leaky, task_id="leaky")

    cause = failed.value.__cause__
    assert isinstance(cause, CodecError)
    assert "grab_lock" in str(cause)
    assert "lock" in str(cause)
    assert failed.value.error["type"] == "cairn.errors.CodecError"
    assert "grab_lock" in failed.value.error["message"]
    history = first.store.load_history("leaky")
    assert [step.name for step in history.values()] == ["fine"]
    row = first.store.get_task("leaky")
    assert row is not None
    assert row.status == "failed"
    assert row.attempts == 1  # a CodecError is never retried


@cairn.step
def fetch_page(url: str, calls: list[str]) -> str:
    calls.append(url)
    return f"<html>{url}</html>"


def test_decorated_steps_are_checkpointed_inside_a_task(
    first: Cairn, url: str, clock: FakeClock
) -> None:
    """Functions decorated with @cairn.step and @app.step(name=, retry=) are recorded
    under their step names when called in a task, retried by their policy, and not
    called again when the task resumes."""
    calls: list[str] = []
    failures = iter([ValueError("flaky once")])

    def declare(app: Cairn) -> Callable[[str], str]:
        policy = Retry(attempts=2, initial_delay=0.5, jitter=0)

        @app.step(name="shout", retry=policy)
        def loud(text: str) -> str:
            calls.append("shout")
            error = next(failures, None)
            if error is not None:
                raise error
            return text.upper()

        return loud

    def decorated(ctx: Context, shout: Callable[[str], str]) -> str:
        page = fetch_page("a.example", calls)
        loud = shout(page)
        ctx.step("after", lambda: None)
        return loud

    first.task(name="decorated")(lambda ctx: decorated(ctx, declare(first)))
    set_fault_hook(first, crash_before(3))
    with pytest.raises(Crash):
        first.run(first.registered("decorated"), task_id="dec")
    clock.advance(PAST_LEASE)
    with second_process(url, clock) as other:
        task = other.task(name="decorated")(lambda ctx: decorated(ctx, declare(other)))
        assert other.run(task, task_id="dec") == "<HTML>A.EXAMPLE</HTML>"
        history = other.store.load_history("dec")

    assert calls == ["a.example", "shout", "shout"]
    assert [(s.name, s.attempts) for s in history.values()] == [
        ("fetch_page", 1),
        ("shout", 2),
        ("after", 1),
    ]
    assert clock.slept[0] == 0.5


def test_decorated_steps_run_plainly_outside_a_task(first: Cairn) -> None:
    """Outside a task, a decorated step is an ordinary function call: it runs every time
    and records nothing."""
    calls: list[str] = []

    @first.step(name="double", retry=Retry(attempts=5))
    def double(x: int) -> int:
        calls.append("double")
        return x * 2

    assert fetch_page("b.example", calls) == "<html>b.example</html>"
    assert double(4) == 8
    assert double(4) == 8
    assert calls == ["b.example", "double", "double"]
    assert list(admin(first.store).list_tasks()) == []
