"""Async tasks: the same engine as sync ones, driven by an event loop.

Every test runs on each backend (``store_url``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

import cairn
from cairn import Cairn, Context, Retry
from cairn.clock import FakeClock
from cairn.testing import set_fault_hook
from tests.crashes import LEASE, PAST_LEASE, Crash, crash_before, logged, second_process
from tests.crashes import url as url  # a fixture: pytest finds it by this name

CALLS: list[str] = []


@cairn.step
async def fetch(x: int) -> int:
    """A decorated async step: the name it is recorded under is 'fetch'."""
    CALLS.append(f"fetch {x}")
    await asyncio.sleep(0)  # real-sleep-ok: a zero yield to the event loop; no time passes
    return x * 10


async def pipeline(ctx: Context, x: int) -> list[int]:
    """Async steps, a decorated async step, a sync step and a durable async sleep."""
    fetched = await fetch(x)
    bumped = await ctx.step("bump", _abump, fetched)
    doubled = ctx.step("double", logged(CALLS, "double", bumped * 2))
    await ctx.asleep(5)
    last = await ctx.step("last", _abump, doubled)
    return [fetched, bumped, doubled, last]


async def _abump(value: int) -> int:
    CALLS.append(f"bump {value}")
    await asyncio.sleep(0)  # real-sleep-ok: a zero yield to the event loop; no time passes
    return value + 1


@pytest.fixture(autouse=True)
def _fresh_calls() -> Iterator[None]:
    CALLS.clear()
    yield
    CALLS.clear()


@pytest.fixture
def first(url: str, clock: FakeClock) -> Iterator[Cairn]:
    with Cairn(url, clock=clock, lease=LEASE) as app:
        yield app


def test_async_task_runs_async_sync_and_decorated_steps(first: Cairn, clock: FakeClock) -> None:
    """app.run drives an async task: async steps, a decorated async step, a sync step
    and ``await ctx.asleep`` are each recorded in order, and the sleep uses the clock."""
    task = first.task(name="pipeline")(pipeline)

    assert first.run(task, x=1) == [10, 11, 22, 23]
    assert CALLS == ["fetch 1", "bump 10", "double", "bump 22"]
    assert clock.slept == [5.0]
    history = first.store.load_history("pipeline/x=1")
    assert [(s.kind, s.name) for s in history.values()] == [
        ("step", "fetch"),
        ("step", "bump"),
        ("step", "double"),
        ("sleep", "sleep"),
        ("step", "last"),
    ]


def test_async_task_resumes_after_a_crash(first: Cairn, url: str, clock: FakeClock) -> None:
    """A crashed async task, resumed by another process, calls only the steps after the
    last recorded one, skips the finished sleep and returns the clean result."""
    first.task(name="pipeline")(pipeline)
    set_fault_hook(first, crash_before(5))
    with pytest.raises(Crash):
        first.run(first.registered("pipeline"), task_id="p", x=2)
    assert CALLS == ["fetch 2", "bump 20", "double"]

    clock.advance(PAST_LEASE)
    with second_process(url, clock) as other:
        assert other.run(other.task(name="pipeline")(pipeline), task_id="p", x=2) == [
            20,
            21,
            42,
            43,
        ]
    assert CALLS == ["fetch 2", "bump 20", "double", "bump 42"]
    assert clock.slept == [5.0]


def test_async_batch_runs_three_tasks_at_once(first: Cairn) -> None:
    """run_batch with concurrency=3 runs async tasks three at a time on one loop, and
    every task completes."""
    active = 0
    most = 0

    async def busy(i: int) -> int:
        nonlocal active, most
        active += 1
        most = max(most, active)
        for _ in range(5):
            await asyncio.sleep(0)  # real-sleep-ok: zero yield; others reach their step
        active -= 1
        return i

    @first.task(name="item")
    async def item(ctx: Context, i: int) -> int:
        return await ctx.step("busy", busy, i)

    report = first.run_batch("b", item, [{"i": i} for i in range(7)], concurrency=3, progress=False)

    assert (report.total, report.completed, report.failed) == (7, 7, 0)
    assert most == 3


def test_arun_inside_a_running_event_loop(first: Cairn) -> None:
    """app.arun runs an async task from inside asyncio.run, returns the recorded result
    on a second call without running anything, and runs a sync task off the loop."""
    task = first.task(name="pipeline")(pipeline)

    @first.task(name="plain")
    def plain(ctx: Context, y: int) -> int:
        return ctx.step("inc", logged(CALLS, "inc", y + 1))

    async def main() -> tuple[list[int], list[int], int]:
        once = await first.arun(task, task_id="a", x=3)
        twice = await first.arun(task, task_id="a", x=3)
        return once, twice, await first.arun(plain, y=1)

    once, twice, sync_result = asyncio.run(main())
    assert once == twice == [30, 31, 62, 63]
    assert sync_result == 2
    assert CALLS == ["fetch 3", "bump 30", "double", "bump 62", "inc"]


def test_arun_batch_inside_a_running_event_loop(first: Cairn) -> None:
    """app.arun_batch runs an async batch from inside asyncio.run."""
    task = first.task(name="pipeline")(pipeline)

    report = asyncio.run(first.arun_batch("ab", task, [{"x": 1}, {"x": 2}], progress=False))
    assert (report.total, report.completed) == (2, 2)
    assert sorted(c for c in CALLS if c.startswith("fetch")) == ["fetch 1", "fetch 2"]


def test_async_step_retry_waits_on_the_clock(first: Cairn, clock: FakeClock) -> None:
    """An async step's retries wait through the clock's async sleep, with backoff."""
    attempts: list[int] = []

    async def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionError("reset")
        return "ok"

    @first.task(name="flaky")
    async def task(ctx: Context) -> str:
        return await ctx.step("call", flaky, retry=Retry(attempts=3, initial_delay=1, jitter=0))

    assert first.run(task) == "ok"
    assert len(attempts) == 3
    assert clock.slept == [1.0, 2.0]
