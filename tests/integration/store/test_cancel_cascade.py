"""A cancel reaches the task's spawned children (``AdminStore.cancel_family``),
in one transaction, atomically with a child that is being claimed or made at
that moment; ``keep_children`` cancels the task alone.

Every test runs on SQLite and on PostgreSQL (``store_url``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from functools import partial
from typing import Any

import pytest

from cairn import Cairn, Context, TaskCancelled
from cairn.admin.actions import CANCEL, apply_to_task
from cairn.clock import FakeClock
from cairn.store import AdminStore, admin, open_store
from cairn.store.records import NewTask, StepRecord, TaskRecord

OWNER = "host/1/1/a"
RACES = 25


@pytest.fixture
def store(store_url: str) -> Iterator[AdminStore]:
    opened = admin(open_store(store_url))
    yield opened
    opened.close()


def _task(task_id: str, parent: str | None = None) -> NewTask:
    return NewTask(task_id, "job", "{}", "json", parent_id=parent)


def _claim(store: AdminStore, task_id: str, clock: FakeClock) -> TaskRecord | None:
    current = store.get_task(task_id)
    assert current is not None
    now = clock.now()
    return store.claim_task(task_id, current.fence, OWNER, now + timedelta(minutes=5), now)


def _step(task: TaskRecord, clock: FakeClock) -> StepRecord:
    now = clock.now()
    return StepRecord(task.id, 1, "step", "s", "completed", "1", 1, 1, 1, None, None, now, now)


def test_a_cancel_reaches_children_and_theirs_in_any_status(
    store: AdminStore, clock: FakeClock
) -> None:
    """Cancelling a task cancels its unfinished children and grandchildren,
    also those under a child that already finished; a finished one is left as
    it is. The answer names the task first, then the rest generation by generation."""
    now = clock.now()
    store.enqueue([_task("p"), _task("p/a", "p"), _task("p/b", "p")], now)
    store.enqueue([_task("p/a/x", "p/a"), _task("p/b/y", "p/b"), _task("other")], now)
    done = _claim(store, "p/b", clock)
    assert done is not None
    assert store.finish_task("p/b", done.fence, "completed", "1", None, now)
    assert store.cancel_family("p", now) == ["p", "p/a", "p/a/x", "p/b/y"]
    statuses = {t.id: t.status for t in store.list_tasks()}
    assert statuses == {
        "p": "cancelled",
        "p/a": "cancelled",
        "p/b": "completed",
        "p/a/x": "cancelled",
        "p/b/y": "cancelled",
        "other": "pending",
    }
    assert store.cancel_family("p", now) == []  # already cancelled: nothing changes


def test_keep_children_cancels_the_task_alone(store: AdminStore, clock: FakeClock) -> None:
    """The admin cancel with ``keep_children`` leaves the children running as
    they were; without it, it names the children it cancelled."""
    now = clock.now()
    store.enqueue([_task("p"), _task("p/a", "p"), _task("q"), _task("q/a", "q")], now)
    kept = apply_to_task(store, CANCEL, "p", now, keep_children=True)
    assert kept.changed
    assert kept.children == []
    cascaded = apply_to_task(store, CANCEL, "q", now)
    assert cascaded.children == ["q/a"]
    assert "1 of its spawned tasks cancelled with it" in cascaded.message
    statuses = {t.id: t.status for t in store.list_tasks()}
    assert statuses == {"p": "cancelled", "p/a": "pending", "q": "cancelled", "q/a": "cancelled"}


def _race(first: Callable[[], Any], second: Callable[[], Any]) -> tuple[Any, Any]:
    """Run both at the same moment on two threads; their answers."""
    barrier = threading.Barrier(2)
    answers: list[Any] = [None, None]
    errors: list[BaseException] = []

    def run(index: int, work: Callable[[], Any]) -> None:
        barrier.wait()
        try:
            answers[index] = work()
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, w)) for i, w in enumerate((first, second))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return answers[0], answers[1]


def test_a_child_claimed_while_its_parent_is_cancelled_is_cancelled_and_writes_nothing(
    store: AdminStore, clock: FakeClock
) -> None:
    """A claim of a child raced against the cascade from its parent, many times:
    the child always ends cancelled, and when the claim won, its claimant's
    first fenced write is refused (it stops at its next step boundary)."""
    claimed_first = 0
    for round_ in range(RACES):
        parent, child = f"p{round_}", f"p{round_}/c"
        store.enqueue([_task(parent), _task(child, parent)], clock.now())
        claim, _ = _race(
            partial(_claim, store, child, clock),
            partial(store.cancel_family, parent, clock.now()),
        )
        after = store.get_task(child)
        assert after is not None, round_
        assert after.status == "cancelled", round_
        if claim is not None:
            claimed_first += 1
            assert not store.record_step(_step(claim, clock), claim.fence, first=True)
    # Either order is a pass; the count only shows which orders the races took.
    assert 0 <= claimed_first <= RACES


def test_a_child_made_while_its_parent_is_cancelled_is_cancelled_or_never_made(
    store: AdminStore, clock: FakeClock
) -> None:
    """A spawn's insert of a child (under its parent's fence) raced against the
    cascade, many times: the child is either not made, or made and cancelled;
    never left pending under a cancelled parent. Made after the cancel, it is
    refused outright."""
    for round_ in range(RACES):
        parent = f"p{round_}"
        store.enqueue([_task(parent)], clock.now())
        running = _claim(store, parent, clock)
        assert running is not None
        child = NewTask(
            f"{parent}/c", "job", "{}", "json", parent_id=parent, parent_fence=running.fence
        )
        made, cancelled = _race(
            partial(store.create_task, child, clock.now()),
            partial(store.cancel_family, parent, clock.now()),
        )
        found = store.get_task(child.id)
        assert cancelled[:1] == [parent]
        assert (found is None) == (not made), round_
        assert found is None or found.status == "cancelled", round_
    assert running is not None
    late = NewTask("p0/late", "job", "{}", "json", parent_id=parent, parent_fence=running.fence)
    assert not store.create_task(late, clock.now())
    assert store.get_task("p0/late") is None  # under the last, cancelled parent


def test_a_parent_cancelled_while_it_spawns_stops_and_leaves_no_child_behind(
    store_url: str, clock: FakeClock
) -> None:
    """A running parent cancelled just before its ctx.spawn makes a child stops
    with the task cancelled, and no child is left to run."""
    app = Cairn(store_url, clock=clock)
    tools = admin(app.store)

    @app.task
    def child(ctx: Context) -> int:
        return 1

    @app.task
    def parent(ctx: Context) -> int:
        ctx.step("before", lambda: tools.cancel_family("p", clock.now()))
        return int(ctx.join([ctx.spawn(child, key="c")])[0])

    with app:
        with pytest.raises(TaskCancelled):
            app.run(parent, task_id="p")
        assert tools.get_task("p/c") is None
        task = tools.get_task("p")
        assert task is not None
        assert task.status == "cancelled"
