"""``ctx.spawn`` / ``ctx.join``: child tasks started once, results recorded.

Every test runs on SQLite and on PostgreSQL (``store_url``).
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest

from cairn import Cairn, Context, Retry, TaskFailed, TaskWaiting
from cairn.clock import FakeClock
from cairn.store import admin
from cairn.testing import set_fault_hook
from tests.crashes import LEASE, Crash, second_process
from tests.crashes import url as url  # a fixture: pytest finds it by this name


def family(url: str, clock: FakeClock, runs: Counter[str], **options: Any) -> Cairn:
    """An app with a parent that spawns three children and joins them."""
    app = Cairn(url, clock=clock, **options)
    lock = threading.Lock()

    @app.task
    def store_installs(ctx: Context, store: str) -> int:
        def fetch() -> int:
            with lock:
                runs[store] += 1
            if store == "broken":
                raise ValueError("store API says no")
            return len(store)

        return int(ctx.step("fetch", fetch))

    @app.task
    def installs(ctx: Context, stores: list[str]) -> int:
        children = [ctx.spawn(store_installs, key=s, store=s) for s in stores]
        counts = ctx.join(children)
        return int(ctx.step("total", lambda: sum(counts)))

    return app


def test_join_returns_the_childrens_results_in_order(url: str, clock: FakeClock) -> None:
    """Children get ids under the parent's, run (here, inline in the join) once
    each, and the join returns their results in spawn order."""
    runs: Counter[str] = Counter()
    app = family(url, clock, runs)
    with app:
        total = app.run(app.registered("installs"), task_id="p", stores=["apple", "google"])
        children = {t.id: t for t in admin(app.store).list_tasks() if t.parent_id == "p"}
        history = app.store.load_history("p")
    assert total == 11
    assert set(children) == {"p/apple", "p/google"}
    assert {t.status for t in children.values()} == {"completed"}
    assert [h.kind for _, h in sorted(history.items())] == ["spawn", "spawn", "join", "step"]
    assert runs == Counter({"apple": 1, "google": 1})


def test_a_resumed_parent_spawns_no_second_child_and_reads_the_join_from_its_record(
    url: str, clock: FakeClock
) -> None:
    """The parent dies after its join is recorded; the resumed parent replays the
    spawns and the join: no new child task, no child run again."""
    runs: Counter[str] = Counter()
    app = family(url, clock, runs)

    def die_before_total(point: str, task_id: str, seq: int, name: str) -> None:
        if point == "before_step" and task_id == "p" and name == "total":
            raise Crash("parent killed after its join")

    set_fault_hook(app, die_before_total)
    with pytest.raises(Crash):
        app.run(app.registered("installs"), task_id="p", stores=["apple", "google"])
    app.close()
    clock.advance(LEASE + 3600)
    again = second_process(url, clock)
    with again:
        registered = family(url, clock, runs)
        for name in ("installs", "store_installs"):
            again.task(name=name)(registered.registered(name).fn)
        total = again.run(again.registered("installs"), task_id="p", stores=["apple", "google"])
        tasks = list(admin(again.store).list_tasks())
    registered.close()
    assert total == 11
    assert len(tasks) == 3
    assert runs == Counter({"apple": 1, "google": 1})


def test_a_failed_child_fails_the_parent_without_retrying_it(url: str, clock: FakeClock) -> None:
    """A child that fails raises ChildFailed in the parent, naming the child and
    how to retry it; the parent's retry policy does not spend attempts on it."""
    runs: Counter[str] = Counter()
    app = family(url, clock, runs, task_retry=Retry(attempts=3, initial_delay=0, jitter=0))
    with app:
        with pytest.raises(TaskFailed, match="child task 'p/broken' failed") as raised:
            app.run(app.registered("installs"), task_id="p", stores=["apple", "broken"])
        parent = app.store.get_task("p")
    assert "ChildFailed" in raised.value.error["type"]
    assert "cairn retry p/broken" in raised.value.error["message"]
    assert parent is not None
    assert parent.attempts == 1
    assert runs["broken"] == 3  # the child's own policy retried it
    assert runs["apple"] == 1


def test_children_in_a_batch_are_run_by_the_batchs_other_threads(
    url: str, clock: FakeClock
) -> None:
    """Children join their parent's batch, so a run_batch with several threads
    runs them alongside; every child runs once and every parent completes. The
    report counts the children it found in the batch at the end: 16 of 16
    completed, ok (not 16 completed of the 4 tasks there were at the start)."""
    runs: Counter[str] = Counter()
    app = family(url, clock, runs)
    with app:
        items = [{"stores": [f"s{p}-{c}" for c in range(3)]} for p in range(4)]
        report = app.run_batch(
            "installs", app.registered("installs"), items, concurrency=4, progress=False
        )
    assert report.counts == {"completed": 16}
    assert (report.completed, report.total, report.ok) == (16, 16, True)
    assert set(runs.values()) == {1}
    assert len(runs) == 12


def test_a_parent_whose_children_wait_for_a_signal_waits_too(url: str, clock: FakeClock) -> None:
    """A child suspended in wait_for suspends its parent (no process held); once
    the child is signalled and done, the parent completes with its result."""
    app = Cairn(url, clock=clock)

    @app.task
    def approve(ctx: Context, what: str) -> str:
        decision = ctx.wait_for("approval")
        return f"{what}: {decision.payload}"

    @app.task
    def rollout(ctx: Context) -> list[str]:
        child = ctx.spawn(approve, key="budget", what="budget")
        return list(ctx.join(child, poll=60))

    with app:
        with pytest.raises(TaskWaiting, match="waiting for its child tasks"):
            app.run(rollout, task_id="r")
        assert app.store.get_task("r").status == "waiting"  # type: ignore[union-attr]
        app.signal("r/budget", "approval", "yes")
        clock.advance(61)
        assert app.run(rollout, task_id="r") == ["budget: yes"]


def test_spawning_a_task_not_registered_on_the_app_is_a_clear_error(
    url: str, clock: FakeClock
) -> None:
    """ctx.spawn of a function that is not a task of this app names it."""
    app = Cairn(url, clock=clock, task_retry=Retry(attempts=1))
    other = Cairn(url, clock=clock)

    @other.task
    def elsewhere(ctx: Context) -> None:
        return None

    @app.task
    def parent(ctx: Context) -> None:
        ctx.spawn(elsewhere)

    with app, pytest.raises(TaskFailed, match="no task function named 'elsewhere'"):
        app.run(parent, task_id="p")
    other.close()
