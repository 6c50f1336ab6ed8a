"""Retries: step and task policies, durable attempt counts, and failures that stay failed.

Every test that uses a store runs on SQLite and on PostgreSQL (``store_url``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from cairn import Cairn, Context, Permanent, Retry, TaskFailed
from cairn.clock import FakeClock
from cairn.testing import set_fault_hook
from tests.crashes import LEASE, PAST_LEASE, Crash, CrashingClock, second_process
from tests.crashes import url as url  # a fixture: pytest finds it by this name

T = TypeVar("T")
NO_JITTER = Retry(attempts=3, initial_delay=1, jitter=0)


def failing(times: int, calls: list[int], error: Callable[[], Exception]) -> Callable[[], str]:
    """A step function that raises ``error()`` on its first ``times`` calls."""

    def attempt() -> str:
        calls.append(len(calls) + 1)
        if len(calls) <= times:
            raise error()
        return f"ok after {len(calls)}"

    return attempt


def logged(calls: list[str], name: str, value: T) -> Callable[[], T]:
    """A step function that notes ``name`` in ``calls`` and returns ``value``."""

    def call() -> T:
        calls.append(name)
        return value

    return call


@pytest.fixture
def app(url: str, clock: FakeClock) -> Iterator[Cairn]:
    """An app whose tasks are not retried unless a test says so."""
    with Cairn(url, clock=clock, lease=LEASE, task_retry=Retry(attempts=1)) as instance:
        yield instance


def test_step_retry_waits_with_backoff_until_it_succeeds(app: Cairn, clock: FakeClock) -> None:
    """A step that fails twice under Retry(attempts=3, initial_delay=1, jitter=0) is called
    three times, waits 1 s then 2 s, and its row records three attempts."""
    calls: list[int] = []
    flaky = failing(2, calls, lambda: ConnectionError("reset"))

    @app.task(name="fetch")
    def fetch(ctx: Context) -> str:
        return ctx.step("fetch", flaky, retry=NO_JITTER)

    assert app.run(fetch, task_id="f") == "ok after 3"
    assert calls == [1, 2, 3]
    assert clock.slept == [1.0, 2.0]
    (row,) = app.store.load_history("f").values()
    assert (row.status, row.attempts, row.run_attempts) == ("completed", 3, 3)


def test_permanent_error_fails_the_task_at_once(url: str, clock: FakeClock) -> None:
    """cairn.Permanent is retried neither by the step's policy nor the task's: the step is
    called once and the task row holds the error's type, message and traceback."""
    calls: list[int] = []

    def charge() -> str:
        calls.append(1)
        raise Permanent("card declined")

    with Cairn(url, clock=clock, task_retry=Retry(attempts=3, jitter=0)) as app:

        @app.task(name="pay")
        def pay(ctx: Context) -> str:
            return ctx.step("charge", charge, retry=Retry(attempts=5, jitter=0))

        with pytest.raises(TaskFailed):
            app.run(pay, task_id="p")
        row = app.store.get_task("p")

    assert calls == [1]
    assert clock.slept == []
    assert row is not None
    assert (row.status, row.attempts) == ("failed", 1)
    error = json.loads(row.error or "{}")
    assert error["type"] == "cairn.errors.Permanent"
    assert error["message"] == "card declined"
    assert "Traceback (most recent call last)" in error["traceback"]
    assert "card declined" in error["traceback"]


def test_retry_on_retries_only_the_errors_it_accepts(app: Cairn) -> None:
    """With retry_on, an accepted error is retried and any other fails the step at once."""
    policy = Retry(attempts=3, jitter=0, retry_on=lambda e: isinstance(e, TimeoutError))
    timeouts: list[int] = []
    bad_input: list[int] = []

    @app.task(name="guarded")
    def guarded(ctx: Context) -> str:
        ctx.step("slow", failing(1, timeouts, TimeoutError), retry=policy)
        return ctx.step("bad", failing(1, bad_input, lambda: ValueError("bad")), retry=policy)

    with pytest.raises(TaskFailed) as failed:
        app.run(guarded, task_id="g")

    assert timeouts == [1, 2]
    assert bad_input == [1]
    assert failed.value.error["type"] == "builtins.ValueError"
    steps = app.store.load_history("g")
    assert [(s.name, s.status, s.attempts) for s in steps.values()] == [
        ("slow", "completed", 2),
        ("bad", "failed", 1),
    ]


def test_give_up_on_stops_retrying_an_error_it_matches(app: Cairn) -> None:
    """With give_up_on, a matching error is not retried though attempts remain, while
    other errors still are."""
    policy = Retry(attempts=4, jitter=0, give_up_on=lambda e: "quota" in str(e))
    errors = iter([RuntimeError("timeout"), RuntimeError("quota exhausted")])
    calls: list[int] = []

    def ask() -> str:
        calls.append(len(calls) + 1)
        raise next(errors)

    @app.task(name="llm")
    def llm(ctx: Context) -> str:
        return ctx.step("ask", ask, retry=policy)

    with pytest.raises(TaskFailed) as failed:
        app.run(llm, task_id="l")
    assert calls == [1, 2]
    assert failed.value.error["message"] == "quota exhausted"


def test_task_retry_reruns_from_the_top_and_replays_completed_steps(
    app: Cairn, clock: FakeClock
) -> None:
    """A task-level Retry(attempts=3) runs the task function again after a failure;
    steps that completed in an earlier attempt are replayed, not called again."""
    fetched: list[str] = []
    analyzed: list[int] = []
    attempts_seen: list[int] = []
    analyze = failing(2, analyzed, lambda: ValueError("model hiccup"))

    @app.task(name="review", retry=NO_JITTER)
    def review(ctx: Context) -> str:
        attempts_seen.append(ctx.attempt)
        page: str = ctx.step("fetch", logged(fetched, "fetch", "page"))
        return page + ":" + ctx.step("analyze", analyze)

    assert app.run(review, task_id="r") == "page:ok after 3"
    assert fetched == ["fetch"]
    assert analyzed == [1, 2, 3]
    assert attempts_seen == [1, 2, 3]
    assert clock.slept == [1.0, 2.0]
    row = app.store.get_task("r")
    assert row is not None
    assert (row.status, row.attempts) == ("completed", 3)
    step = app.store.load_history("r")[2]
    # Total calls add up across task attempts; the step's own budget restarts each time.
    assert (step.attempts, step.run_attempts, step.task_attempt) == (3, 1, 3)


def test_step_attempt_count_survives_a_crash(app: Cairn, url: str, clock: FakeClock) -> None:
    """A crash during a step's 2nd attempt resumes at attempt 2, not 1: the budget of
    three calls is spent once across the crash, and the row says so."""
    calls: list[int] = []
    always = failing(99, calls, lambda: ConnectionError("down"))
    before_calls: list[int] = []

    def hook(point: str, task_id: str, seq: int, name: str) -> None:
        if point == "before_step" and name == "call":
            before_calls.append(seq)
            if len(before_calls) == 2:
                raise Crash("killed during attempt 2")

    def task(ctx: Context) -> str:
        return ctx.step("call", always, retry=NO_JITTER)

    app.task(name="durable")(task)
    set_fault_hook(app, hook)
    with pytest.raises(Crash):
        app.run(app.registered("durable"), task_id="d")
    (retrying,) = app.store.load_history("d").values()
    assert (retrying.status, retrying.attempts, retrying.run_attempts) == ("retrying", 1, 1)

    clock.advance(PAST_LEASE)
    with second_process(url, clock, task_retry=Retry(attempts=1)) as other:
        with pytest.raises(TaskFailed):
            other.run(other.task(name="durable")(task), task_id="d")
        (failed,) = other.store.load_history("d").values()

    assert calls == [1, 2, 3]
    assert (failed.status, failed.attempts, failed.run_attempts) == ("failed", 3, 3)
    # The 1 s wait before attempt 2 was slept before the crash; the resumed run waits
    # only the 2 s before attempt 3, as a run without a crash would have.
    assert [s for s in clock.slept if s > 0] == [1.0, 2.0]


def test_crash_during_backoff_waits_only_what_is_left(url: str) -> None:
    """A crash 20 s into a 60 s retry wait, then down until another process may take
    the task over: the resumed run waits only what is left of the 60 s before the
    step's 2nd attempt, which it calls only once."""
    clock = CrashingClock()
    calls: list[int] = []
    flaky = failing(1, calls, lambda: ConnectionError("reset"))

    def task(ctx: Context) -> str:
        return ctx.step("call", flaky, retry=Retry(attempts=3, initial_delay=60, jitter=0))

    with Cairn(url, clock=clock, lease=LEASE, task_retry=Retry(attempts=1)) as app:
        app.task(name="patient")(task)
        clock.crash_after = 20
        with pytest.raises(Crash):
            app.run(app.registered("patient"), task_id="p")

    clock.advance(PAST_LEASE)
    with second_process(url, clock, task_retry=Retry(attempts=1)) as other:
        assert other.run(other.task(name="patient")(task), task_id="p") == "ok after 2"
        (row,) = other.store.load_history("p").values()

    assert clock.slept == [20.0, pytest.approx(60 - 20 - PAST_LEASE)]
    assert calls == [1, 2]
    assert (row.attempts, row.run_attempts) == (2, 2)


def test_task_attempt_number_survives_a_crash(app: Cairn, url: str, clock: FakeClock) -> None:
    """A crash during task attempt 2 resumes in attempt 2: ctx.attempt and the task row
    keep the number, so the crash spends no attempt of the task's budget."""
    calls: list[int] = []
    attempts_seen: list[int] = []
    flaky = failing(1, calls, lambda: ValueError("first try fails"))
    crashes = iter([None, Crash("killed in attempt 2")])

    def hook(point: str, task_id: str, seq: int, name: str) -> None:
        if point == "before_step":
            crash = next(crashes, None)
            if crash is not None:
                raise crash

    def task(ctx: Context) -> str:
        attempts_seen.append(ctx.attempt)
        return ctx.step("work", flaky)

    policy = Retry(attempts=2, initial_delay=1, jitter=0)
    app.task(name="tries", retry=policy)(task)
    set_fault_hook(app, hook)
    with pytest.raises(Crash):
        app.run(app.registered("tries"), task_id="t")

    clock.advance(PAST_LEASE)
    with second_process(url, clock, task_retry=Retry(attempts=1)) as other:
        assert other.run(other.task(name="tries", retry=policy)(task), task_id="t") == (
            "ok after 2"
        )
        row = other.store.get_task("t")

    assert attempts_seen == [1, 2, 2]
    assert calls == [1, 2]
    assert row is not None
    assert (row.status, row.attempts) == ("completed", 2)


def test_exhausted_task_fails_and_the_rest_of_the_batch_goes_on(url: str, clock: FakeClock) -> None:
    """When one task of a batch runs out of attempts it ends failed, the other tasks
    complete, and the report counts and lists the failure."""
    calls: dict[int, int] = {}

    with Cairn(url, clock=clock) as app:

        @app.task(name="item", retry=Retry(attempts=2, initial_delay=0, jitter=0))
        def item(ctx: Context, i: int) -> int:
            calls[i] = calls.get(i, 0) + 1
            if i == 3:
                raise ValueError(f"item {i} is broken")
            return ctx.step("square", lambda: i * i)

        report = app.run_batch("nightly", item, [{"i": i} for i in range(5)], progress=False)

    assert (report.total, report.completed, report.failed) == (5, 4, 1)
    assert not report.ok
    (failure,) = report.failures
    assert failure.task_id == "nightly/i=3"
    assert failure.error_type == "builtins.ValueError"
    assert "item 3 is broken" in failure.message
    assert calls == {0: 1, 1: 1, 2: 1, 3: 2, 4: 1}


def test_failed_task_raises_task_failed_now_and_on_every_later_run(app: Cairn) -> None:
    """app.run on a task that fails raises TaskFailed carrying the recorded type, message
    and traceback; running it again raises the same error, calls nothing, and says
    how to run the task anew."""
    calls: list[str] = []

    def divide(n: int) -> float:
        calls.append("step")
        return 1 / n

    @app.task(name="doomed")
    def doomed(ctx: Context, n: int) -> None:
        calls.append("task")
        ctx.step("explode", divide, n)

    with pytest.raises(TaskFailed) as first:
        app.run(doomed, task_id="x", n=0)
    with pytest.raises(TaskFailed) as again:
        app.run(doomed, task_id="x", n=0)

    assert calls == ["task", "step"]
    error = first.value.error
    assert error["type"] == "builtins.ZeroDivisionError"
    assert error["message"] == "division by zero"
    assert "ZeroDivisionError" in error["traceback"]
    assert again.value.error == error
    assert str(again.value).startswith(str(first.value))
    assert "cairn retry x --store" in str(again.value)
    assert again.value.task_id == first.value.task_id == "x"
