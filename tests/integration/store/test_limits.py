"""Shared limits and RetryAfter deferral, in one process, on each backend.

Limits are checked where they matter: on the request log of a real HTTP server
on 127.0.0.1 (``ApiServer``), by the server's own clock. The tests that need
threads to really contend use the real clock with short windows; the deferral
tests use the fake clock, whose sleeps only move its own time.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

import cairn
from cairn import (
    Cairn,
    Concurrency,
    Context,
    Rate,
    Retry,
    RetryAfter,
    TaskFailed,
)
from cairn.clock import FakeClock
from cairn.retry import NO_RETRY
from tests.crashes import LEASE, PAST_LEASE, Crash, CrashingClock, second_process
from tests.crashes import url as url  # a fixture: pytest finds it by this name
from tests.servers import ApiServer, busiest_window


@pytest.fixture
def api() -> Iterator[ApiServer]:
    with ApiServer(hold=0.02) as server:
        yield server


def call_api(base: str, n: int) -> int:
    response = httpx.post(f"{base}/call/{n}", timeout=10)
    response.raise_for_status()
    return n


def test_a_step_naming_an_unknown_limit_fails_at_once(any_app: Cairn) -> None:
    """A step's limit= that is not declared fails the task on its first attempt,
    naming the limit and the declared ones; the step function is never called."""
    any_app.limits = {"db": Concurrency(2), "ads-api": Rate(10)}
    calls: list[int] = []

    @any_app.task
    def job(ctx: Context) -> None:
        ctx.step("s", calls.append, 1, limit="ad-api")

    with pytest.raises(TaskFailed, match=r"'ad-api'.*declared: 'ads-api', 'db'") as failed:
        any_app.run(job)
    assert calls == []
    assert failed.value.error["type"] == "cairn.errors.ConfigurationError"
    record = any_app.store.get_task("job")
    assert record is not None
    assert record.attempts == 1


# -- limits held in one process -------------------------------------------------------------
def test_rate_holds_across_many_threads(store_url: str, api: ApiServer) -> None:
    """Rate(5, per=0.5 s) over 8 threads calling a real server: no 0.5 s window of
    the server's own log holds more than 5 requests, and each item is called once.
    (The window is scaled down from a minute so the test runs in seconds.)"""
    app = Cairn(store_url, limits={"api": Rate(5, per=0.5)}, task_retry=NO_RETRY)

    @app.task
    def item(ctx: Context, n: int) -> int:
        return ctx.step("call", call_api, api.url, n, limit="api")

    with app:
        report = app.run_batch("rate", item, [{"n": n} for n in range(20)], concurrency=8)
    assert report.completed == 20
    arrivals = api.arrivals
    assert Counter(a.path for a in arrivals) == Counter(f"/call/{n}" for n in range(20))
    assert busiest_window([a.at for a in arrivals], 0.5) <= 5


def test_concurrency_holds_across_many_threads(store_url: str) -> None:
    """Concurrency(2) over 6 threads: the server never has more than 2 of these
    requests in flight at once, and 2 calls did hold permits together (each call
    waits at a barrier for a partner: were the limit a lock, the barrier would
    break), whatever the machine's speed."""
    app = Cairn(store_url, limits={"db": Concurrency(2)}, task_retry=NO_RETRY)
    pair = threading.Barrier(2, timeout=60)

    def paired_call(url: str, n: int) -> int:
        pair.wait()  # a second holder of the limit arrives, or this breaks
        return call_api(url, n)

    with ApiServer(hold=0.1) as api:

        @app.task
        def item(ctx: Context, n: int) -> int:
            return ctx.step("call", paired_call, api.url, n, limit="db")

        with app:
            report = app.run_batch("conc", item, [{"n": n} for n in range(12)], concurrency=6)
        arrivals = api.arrivals
    assert report.completed == 12
    assert not pair.broken
    assert len(arrivals) == 12
    assert max(a.in_flight for a in arrivals) <= 2


def test_a_replayed_step_takes_no_permit(url: str) -> None:
    """A step completed before a crash replays without asking its limit: with the
    only permit of the hour spent, the resumed task neither waits nor calls again."""
    clock = FakeClock()
    calls: list[int] = []

    def count() -> int:
        calls.append(1)
        return len(calls)

    def once_an_hour(ctx: Context) -> int:
        value: int = ctx.step("call", count, limit="hourly")
        ctx.step("crash", lambda: None)
        return value

    def crash_at_second_step(point: str, task_id: str, seq: int, name: str) -> None:
        if point == "before_step" and name == "crash" and len(calls) == 1 and not resumed:
            raise Crash("killed")

    resumed = False
    limits = {"hourly": Rate(1, per=3600)}
    with Cairn(url, clock=clock, lease=LEASE, limits=limits, task_retry=NO_RETRY) as first:
        first.fault_hook = crash_at_second_step
        with pytest.raises(Crash):
            first.run(first.task(name="hourly")(once_an_hour), task_id="h")
    resumed = True
    clock.advance(PAST_LEASE)
    slept_before = list(clock.slept)
    with second_process(url, clock, limits=limits, task_retry=NO_RETRY) as other:
        assert other.run(other.task(name="hourly")(once_an_hour), task_id="h") == 1
    assert calls == [1]
    assert clock.slept == slept_before


def test_a_full_rate_waits_for_its_window_without_spending_attempts(any_app: Cairn) -> None:
    """Rate(2, per=10 s) and four sequential calls on the fake clock: the third and
    fourth wait for the window (sleeps, not failures) and each step made one attempt."""
    any_app.limits = {"api": Rate(2, per=10)}
    times: list[float] = []
    start = any_app.clock.now()

    def stamp() -> None:
        times.append((any_app.clock.now() - start).total_seconds())

    @any_app.task
    def job(ctx: Context) -> None:
        for i in range(4):
            ctx.step(f"s{i}", stamp, limit="api")

    any_app.run(job)
    assert times[:2] == [0.0, 0.0]
    assert 10.0 <= times[2] < 10.1
    assert 10.0 <= times[3] < 10.1
    assert all(row.run_attempts == 1 for row in any_app.store.load_history("job").values())


# -- RetryAfter --------------------------------------------------------------------------------
def test_retry_after_defers_without_spending_attempts(any_app: Cairn, clock: FakeClock) -> None:
    """A step with no retries of its own that is told "retry after 30 s" twice waits
    30 s twice and succeeds on its third call, in the task's first attempt."""
    any_app.task_retry = NO_RETRY
    calls: list[int] = []

    def throttled() -> str:
        calls.append(1)
        if len(calls) <= 2:
            raise RetryAfter(30)
        return "done"

    @any_app.task
    def job(ctx: Context) -> str:
        return ctx.step("call", throttled)

    assert any_app.run(job) == "done"
    (row,) = any_app.store.load_history("job").values()
    assert len(calls) == 3
    assert [s for s in clock.slept if s] == [30.0, 30.0]
    assert (row.attempts, row.run_attempts, row.deferred) == (3, 1, 60.0)
    record = any_app.store.get_task("job")
    assert record is not None
    assert record.attempts == 1


def test_an_error_raised_from_retry_after_defers_too(any_app: Cairn, clock: FakeClock) -> None:
    """An outside error chained ``from`` a RetryAfter is deferred like the RetryAfter."""
    any_app.task_retry = NO_RETRY
    calls: list[int] = []

    def quota() -> int:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("quota exceeded") from RetryAfter(5)
        return len(calls)

    @any_app.task
    def job(ctx: Context) -> int:
        return ctx.step("call", quota)

    assert any_app.run(job) == 2
    assert [s for s in clock.slept if s] == [5.0]


def test_endless_deferral_is_bounded_by_max_deferral(any_app: Cairn, clock: FakeClock) -> None:
    """A service that always says "later" (40 s) with max_deferral=100: two waits
    fit (80 s), the third would not, so it counts as a failed attempt; the second
    attempt's deferral also would not fit, so the step fails with RetryAfter recorded."""
    any_app.task_retry = NO_RETRY
    calls: list[int] = []

    def never() -> None:
        calls.append(1)
        raise RetryAfter(40)

    policy = Retry(attempts=2, initial_delay=1, jitter=0, max_deferral=100)

    @any_app.task
    def job(ctx: Context) -> None:
        ctx.step("call", never, retry=policy)

    with pytest.raises(TaskFailed, match="RetryAfter"):
        any_app.run(job)
    (row,) = any_app.store.load_history("job").values()
    assert len(calls) == 4
    assert [s for s in clock.slept if s] == [40.0, 40.0, 1.0]
    assert (row.status, row.attempts, row.run_attempts, row.deferred) == ("failed", 4, 2, 80.0)


def test_permanent_wins_over_retry_after(any_app: Cairn) -> None:
    """A Permanent error wrapping a RetryAfter is not deferred: it fails at once."""
    any_app.task_retry = NO_RETRY
    calls: list[int] = []

    def refuse() -> None:
        calls.append(1)
        raise cairn.Permanent("account closed") from RetryAfter(5)

    @any_app.task
    def job(ctx: Context) -> None:
        ctx.step("call", refuse)

    with pytest.raises(TaskFailed):
        any_app.run(job)
    assert calls == [1]


def test_crash_during_a_deferral_waits_only_what_is_left(url: str) -> None:
    """A crash 10 s into a 30 s RetryAfter wait, then down until another process may
    take the task over: the resumed run waits only what is left of the 30 s, calls
    once more, and no attempt was spent on the wait."""
    clock = CrashingClock()
    calls: list[int] = []

    def throttled_once() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise RetryAfter(30)
        return "done"

    def task(ctx: Context) -> str:
        return ctx.step("call", throttled_once)

    with Cairn(url, clock=clock, lease=LEASE, task_retry=NO_RETRY) as app:
        app.task(name="deferred")(task)
        clock.crash_after = 10
        with pytest.raises(Crash):
            app.run(app.registered("deferred"), task_id="d")

    clock.advance(PAST_LEASE)
    with second_process(url, clock, task_retry=NO_RETRY) as other:
        assert other.run(other.task(name="deferred")(task), task_id="d") == "done"
        (row,) = other.store.load_history("d").values()

    assert [s for s in clock.slept if s] == [10.0, pytest.approx(30 - 10 - PAST_LEASE)]
    assert calls == [1, 1]
    assert (row.attempts, row.run_attempts, row.deferred) == (2, 1, 30.0)


def test_async_steps_share_a_concurrency_limit(store_url: str) -> None:
    """Async tasks on one event loop: Concurrency(1) lets one call at a time reach
    the server, and the async step functions' results come back as usual."""
    app = Cairn(store_url, limits={"one": Concurrency(1)}, task_retry=NO_RETRY)
    with ApiServer(hold=0.05) as api:

        async def post(n: int) -> int:
            async with httpx.AsyncClient() as client:
                response = await client.post(f"{api.url}/call/{n}", timeout=10)
            response.raise_for_status()
            return n * 10

        @app.task
        async def item(ctx: Context, n: int) -> int:
            result: int = await ctx.step("call", post, n, limit="one")
            return result

        with app:
            report = app.run_batch("async", item, [{"n": n} for n in range(6)], concurrency=4)
            results = sorted(app.run(item, task_id=f"async/n={n}", n=n) for n in range(6))
        arrivals = api.arrivals
    assert report.completed == 6
    assert results == [0, 10, 20, 30, 40, 50]
    assert len(arrivals) == 6
    assert max(a.in_flight for a in arrivals) == 1


def test_a_permit_comes_back_at_once_when_a_base_exception_leaves_the_call(
    url: str, clock: FakeClock
) -> None:
    """A BaseException raised inside a limited call (here Crash; in life a
    KeyboardInterrupt) closes the step's machine, so the permit is given back at
    once: the next task takes the Concurrency(1) permit without waiting out the
    holder's lease."""
    app = Cairn(url, clock=clock, limits={"db": cairn.Concurrency(1)})

    def interrupted() -> None:
        raise Crash("interrupted mid-call")

    @app.task
    def first(ctx: Context) -> None:
        ctx.step("query", interrupted, limit="db")

    @app.task
    def second(ctx: Context) -> str:
        return str(ctx.step("query", lambda: "ok", limit="db"))

    with app:
        with pytest.raises(Crash) as raised:
            app.run(first, task_id="first")
        # The exception (and so its traceback's frames) is still alive here, as
        # in a handler that logs it and goes on: the permit must not wait for
        # the garbage collector.
        assert app.run(second, task_id="second") == "ok"
    assert clock.slept == []  # no wait for the permit
    assert str(raised.value) == "interrupted mid-call"
