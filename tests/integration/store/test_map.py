"""``ctx.map``: a checkpoint per item, only missing items on resume, any concurrency.

Every test runs on SQLite and on PostgreSQL (``store_url``).
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Any

import pytest

import cairn
from cairn import Cairn, Context, Retry, TaskFailed
from cairn.clock import FakeClock
from cairn.store import admin
from cairn.testing import set_fault_hook
from tests.crashes import LEASE, Crash, second_process
from tests.crashes import url as url  # a fixture: pytest finds it by this name

COUNTRIES = [f"c{i:02d}" for i in range(12)]


class Quota(Exception):
    """Stands for RESOURCE_EXHAUSTED from a reporting API."""


class Api:
    """Counts calls per item, thread-safely; can fail some items."""

    def __init__(self, failing: set[str] | None = None) -> None:
        self.calls: Counter[str] = Counter()
        self.failing = failing or set()
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0

    def fetch(self, country: str) -> dict[str, Any]:
        with self.lock:
            self.calls[country] += 1
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if country in self.failing:
                raise Quota(f"quota exhausted at {country}")
            return {"country": country, "revenue": len(country) * 10}
        finally:
            with self.lock:
                self.in_flight -= 1


def make_app(url: str, clock: FakeClock, api: Api, parallel: dict[str, int]) -> tuple[Cairn, Any]:
    app = Cairn(url, clock=clock, task_retry=Retry(attempts=1))

    @app.task
    def revenue(ctx: Context, countries: list[str]) -> list[Any]:
        rows = ctx.map(api.fetch, countries, name="fetch", concurrency=parallel["n"])
        return [row["revenue"] for row in rows]

    return app, revenue


def test_map_returns_results_in_item_order_with_one_checkpoint_per_item(
    url: str, clock: FakeClock
) -> None:
    """Results come back in item order whatever order the threads finish in, and
    the history holds the map's head plus one completed step per item."""
    api = Api()
    app, revenue = make_app(url, clock, api, {"n": 4})
    with app:
        assert app.run(revenue, task_id="r", countries=COUNTRIES) == [30] * 12
        history = app.store.load_history("r")
    assert history[1].kind == "map"
    assert [history[i].name for i in range(2, 14)] == [f"fetch[{c}]" for c in COUNTRIES]
    assert {history[i].status for i in range(2, 14)} == {"completed"}
    assert api.calls == Counter(dict.fromkeys(COUNTRIES, 1))
    assert api.most_in_flight <= 4


def test_a_resumed_map_runs_only_the_items_that_failed(url: str, clock: FakeClock) -> None:
    """Two items fail with a quota error; the others keep their checkpoints. The
    rerun (after `cairn retry`) calls only the two that failed, once each."""
    api = Api(failing={"c03", "c07"})
    app, revenue = make_app(url, clock, api, {"n": 4})
    with app:
        with pytest.raises(TaskFailed, match="quota exhausted at c03"):
            app.run(revenue, task_id="r", countries=COUNTRIES)
        assert sum(api.calls.values()) == 12
        api.failing.clear()
        assert admin(app.store).retry_task("r", clock.now())
        assert app.run(revenue, task_id="r", countries=COUNTRIES) == [30] * 12
    assert api.calls == Counter({**dict.fromkeys(COUNTRIES, 1), "c03": 2, "c07": 2})


def test_concurrency_may_change_between_runs_without_breaking_replay(
    url: str, clock: FakeClock
) -> None:
    """A run at parallelism 12 dies part way; the rerun at parallelism 4 replays
    the finished items and runs the rest, each item exactly once in all."""
    api = Api()
    parallel = {"n": 12}
    app, revenue = make_app(url, clock, api, parallel)
    done: list[str] = []

    def die_after_five(point: str, task_id: str, seq: int, name: str) -> None:
        if point == "after_step":
            done.append(name)
            if len(done) == 5:
                raise Crash("killed mid-map")

    set_fault_hook(app, die_after_five)
    with pytest.raises(Crash):
        app.run(revenue, task_id="r", countries=COUNTRIES)
    recorded = sum(1 for r in app.store.load_history("r").values() if r.kind == "step")
    assert recorded >= 5
    app.close()
    clock.advance(LEASE + 3600)  # past the dead run's lease
    parallel["n"] = 4
    with second_process(url, clock, task_retry=Retry(attempts=1)) as again:
        again.task(name="revenue")(lambda ctx, countries: revenue.fn(ctx, countries))
        assert again.run(again.registered("revenue"), task_id="r", countries=COUNTRIES) == [30] * 12
    # Items whose checkpoint was written never ran again; an item caught between
    # its call and its checkpoint (the at-least-once window) ran at most twice.
    assert set(api.calls) == set(COUNTRIES)
    assert sum(api.calls.values()) <= 12 + (12 - recorded)
    assert all(n <= 2 for n in api.calls.values())


def test_changing_the_number_of_items_is_a_non_determinism_error(
    url: str, clock: FakeClock
) -> None:
    """A map replayed with a different number of items stops with the recorded and
    current counts named, and the record is untouched."""
    api = Api(failing={"c01"})
    shown = {"count": 4}
    app = Cairn(url, clock=clock, task_retry=Retry(attempts=1))

    @app.task
    def revenue(ctx: Context) -> list[Any]:
        # The code changed between runs: it now maps over more countries.
        return list(ctx.map(api.fetch, COUNTRIES[: shown["count"]], name="fetch"))

    with app:
        with pytest.raises(TaskFailed):
            app.run(revenue, task_id="r")
        before = app.store.load_history("r")
        admin(app.store).retry_task("r", clock.now())
        shown["count"] = 6
        with pytest.raises(TaskFailed, match="map fetch of 4 items") as raised:
            app.run(revenue, task_id="r")
        assert "NonDeterminismError" in raised.value.error["type"]
        assert app.store.load_history("r") == before


def test_items_with_the_same_key_are_refused_before_anything_runs(
    url: str, clock: FakeClock
) -> None:
    """Two items that would share a checkpoint name raise a clear error, and no
    item is called."""
    api = Api()
    app = Cairn(url, clock=clock, task_retry=Retry(attempts=1))

    @app.task
    def dup(ctx: Context) -> list[Any]:
        return list(ctx.map(api.fetch, ["jp", "us", "jp"], name="fetch"))

    with app, pytest.raises(TaskFailed, match="have the same key 'jp'"):
        app.run(dup, task_id="d")
    assert not api.calls


def test_a_key_function_names_each_items_checkpoint(url: str, clock: FakeClock) -> None:
    """``key=`` names items that are not plain strings, so dicts map fine."""
    app = Cairn(url, clock=clock)
    items = [{"app": "a1", "store": "apple"}, {"app": "a1", "store": "google"}]

    @app.task
    def installs(ctx: Context) -> list[str]:
        return list(
            ctx.map(
                lambda item: f"{item['app']}@{item['store']}",
                items,
                name="installs",
                key=lambda item: f"{item['app']}-{item['store']}",
            )
        )

    with app:
        assert app.run(installs, task_id="i") == ["a1@apple", "a1@google"]
        names = [r.name for r in app.store.load_history("i").values() if r.kind == "step"]
    assert names == ["installs[a1-apple]", "installs[a1-google]"]


def test_a_step_decorated_function_is_checkpointed_once_per_item(
    url: str, clock: FakeClock
) -> None:
    """A ``@cairn.step`` function used as the map's function runs as the item's
    step, not as a second step at a position of its own."""
    app = Cairn(url, clock=clock)

    @cairn.step
    def double(n: int) -> int:
        return n * 2

    @app.task
    def doubles(ctx: Context) -> tuple[list[int], int]:
        values = ctx.map(double, [1, 2, 3], concurrency=1)
        after = ctx.step("after", lambda: 7)
        return values, after

    with app:
        assert app.run(doubles, task_id="d") == ([2, 4, 6], 7)
        kinds = [(r.kind, r.name) for _, r in sorted(app.store.load_history("d").items())]
    assert kinds == [
        ("map", "double"),
        ("step", "double[1]"),
        ("step", "double[2]"),
        ("step", "double[3]"),
        ("step", "after"),
    ]


def test_an_async_map_runs_items_as_coroutines_and_resumes_the_same_way(
    url: str, clock: FakeClock
) -> None:
    """With an ``async def`` function the map is awaited; a failed item is the only
    one called again on the rerun."""
    calls: Counter[int] = Counter()
    broken = {2}
    app = Cairn(url, clock=clock, task_retry=Retry(attempts=1))

    async def square(n: int) -> int:
        calls[n] += 1
        await asyncio.sleep(0)  # real-sleep-ok: zero seconds, only lets the other items interleave
        if n in broken:
            raise Quota(f"no quota for {n}")
        return n * n

    @app.task
    async def squares(ctx: Context) -> list[int]:
        return list(await ctx.map(square, [1, 2, 3, 4], concurrency=2))

    with app:
        with pytest.raises(TaskFailed, match="no quota for 2"):
            app.run(squares, task_id="s")
        broken.clear()
        admin(app.store).retry_task("s", clock.now())
        assert app.run(squares, task_id="s") == [1, 4, 9, 16]
    assert calls == Counter({1: 1, 2: 2, 3: 1, 4: 1})


def test_an_item_retries_under_its_own_policy(url: str, clock: FakeClock) -> None:
    """``retry=`` applies per item: a flaky item is retried with durable attempts
    and the map completes without the task failing."""
    flaky: Counter[str] = Counter()
    app = Cairn(url, clock=clock, task_retry=Retry(attempts=1))

    def fetch(country: str) -> str:
        flaky[country] += 1
        if country == "us" and flaky[country] < 3:
            raise Quota("try later")
        return country.upper()

    @app.task
    def fetch_all(ctx: Context) -> list[str]:
        policy = Retry(attempts=3, initial_delay=1, jitter=0)
        return list(ctx.map(fetch, ["jp", "us"], retry=policy))

    with app:
        assert app.run(fetch_all, task_id="f") == ["JP", "US"]
        us = next(r for r in app.store.load_history("f").values() if r.name == "fetch[us]")
    assert flaky == Counter({"jp": 1, "us": 3})
    assert us.attempts == 3


def test_map_items_share_a_concurrency_limit(url: str) -> None:
    """``limit=`` makes every item hold a permit of the app's shared limit: with
    Concurrency(2), eight threads never have more than two calls in flight, and
    two did hold permits together (each call waits at a barrier for a partner:
    were the limit a lock, it would break), whatever the machine's speed."""
    api = Api()
    # The real clock: waiting for a permit must really wait (a fake clock's
    # sleep returns at once and moves time past the holders' leases).
    app = Cairn(url, limits={"reporting": cairn.Concurrency(2)})
    lock = threading.Lock()
    flight = {"now": 0, "most": 0}
    pair = threading.Barrier(2, timeout=60)

    def slow_fetch(country: str) -> dict[str, Any]:
        with lock:
            flight["now"] += 1
            flight["most"] = max(flight["most"], flight["now"])
        try:
            pair.wait()  # a second holder of the limit arrives, or this breaks
            return api.fetch(country)
        finally:
            with lock:
                flight["now"] -= 1

    @app.task
    def revenue(ctx: Context) -> int:
        rows = ctx.map(slow_fetch, COUNTRIES, concurrency=8, limit="reporting")
        return len(rows)

    with app:
        assert app.run(revenue, task_id="r") == 12
    assert not pair.broken
    assert flight["most"] == 2
    assert sum(api.calls.values()) == 12
