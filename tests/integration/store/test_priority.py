"""A task's priority: claims take the highest first and, within one priority,
the oldest; it changes while the task is pending or waiting, never after; a
spawned child is claimed at its parent's. The claim stays one probe of the
index of pending rows (tests/integration/test_claim_plans.py shows the plans).

Every test runs on SQLite and on PostgreSQL (``store_url``).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from cairn import Cairn, Context
from cairn.admin import set_batch_priority, set_priority
from cairn.clock import FakeClock
from cairn.errors import ConfigurationError
from cairn.store import AdminStore, admin, open_store
from cairn.store.records import NewTask

OWNER = "host/1/1/a"


@pytest.fixture
def store(store_url: str) -> Iterator[AdminStore]:
    opened = admin(open_store(store_url))
    yield opened
    opened.close()


def _task(task_id: str, priority: int = 0, batch: str | None = None) -> NewTask:
    return NewTask(task_id, "job", "{}", "json", batch=batch, priority=priority)


def _claim_order(store: AdminStore, clock: FakeClock, batch: str | None = None) -> list[str]:
    now = clock.now()
    order = []
    while claimed := store.claim_next_pending(
        batch, OWNER, now + timedelta(minutes=5), now, names=None if batch else ["job"]
    ):
        order.append(claimed.id)
    return order


def test_claims_take_the_highest_priority_first_and_the_oldest_within_one(
    store: AdminStore, clock: FakeClock
) -> None:
    """Enqueued in the order a..f with priorities 0, 5, 0, -1, 5, 10: claimed
    10, then the two 5s oldest first, then the 0s, then -1; by task name and by
    batch alike."""
    now = clock.now()
    priorities = {"a": 0, "b": 5, "c": 0, "d": -1, "e": 5, "f": 10}
    for name, batch in (("job", None), ("b1", "b1")):
        if batch:
            store.ensure_batch(batch, "job", now)
        store.enqueue(
            [_task(f"{name}/{k}", p, batch) for k, p in priorities.items()],
            now,
        )
        got = _claim_order(store, clock, batch)
        assert got == [f"{name}/{k}" for k in "fbeacd"]


def test_a_high_priority_task_enqueued_last_is_claimed_next(
    store: AdminStore, clock: FakeClock
) -> None:
    """2,000 pending tasks of priority 0, then one of priority 10: the next
    claim takes it, and the one after takes the oldest of the rest."""
    now = clock.now()
    store.ensure_batch("big", "job", now)
    store.enqueue([_task(f"big/{n}", 0, "big") for n in range(2000)], now)
    store.enqueue([_task("big/urgent", 10, "big")], now)
    lease = now + timedelta(minutes=5)
    first = store.claim_next_pending(None, OWNER, lease, now, names=["job"])
    second = store.claim_next_pending("big", OWNER, lease, now)
    assert first is not None
    assert first.id == "big/urgent"
    assert first.priority == 10
    assert second is not None
    assert second.id == "big/0"


def test_a_pending_tasks_priority_changes_and_a_running_ones_does_not(
    store: AdminStore, clock: FakeClock
) -> None:
    """set_priority moves a pending task ahead and says from what to what; on a
    running task it changes nothing and says why; on a missing one it says so.
    Each is in the audit trail."""
    now = clock.now()
    store.enqueue([_task("x"), _task("y"), _task("z")], now)
    moved = set_priority(store, "z", 3, now)
    assert moved.changed
    assert moved.message == "task z: priority 0 -> 3"
    assert _claim_order(store, clock)[:1] == ["z"]
    running = set_priority(store, "x", 9, now)
    assert not running.changed
    assert "task x is running; only a pending or waiting task's priority" in running.message
    missing = set_priority(store, "nope", 1, now)
    assert not missing.changed
    assert "no task 'nope'" in missing.message
    audited = [(e.action, e.target, e.count) for e in store.audit_page(None, 10)]
    assert audited == [
        ("priority", "task nope", 0),
        ("priority", "task x", 0),
        ("priority", "task z", 1),
    ]


def test_a_batchs_pending_tasks_take_a_new_priority_together(
    store: AdminStore, clock: FakeClock
) -> None:
    """set_batch_priority changes every pending task of one batch, none of
    another: that batch is then claimed first."""
    now = clock.now()
    for batch in ("early", "late"):
        store.ensure_batch(batch, "job", now)
        store.enqueue([_task(f"{batch}/{n}", 0, batch) for n in range(3)], now)
    applied = set_batch_priority(store, "late", 2, now)
    assert applied.changed
    assert applied.message == "3 pending or waiting task(s) of batch 'late' now have priority 2"
    assert _claim_order(store, clock) == [
        *(f"late/{n}" for n in range(3)),
        *(f"early/{n}" for n in range(3)),
    ]


@pytest.mark.parametrize("bad", [True, 1.5, "10", 10**7, -(10**7)])
def test_a_bad_priority_is_refused_in_one_line(
    store: AdminStore, clock: FakeClock, bad: object
) -> None:
    """A priority that is not an integer in range: refused by the admin call
    (nothing changed) and by enqueue (nothing written)."""
    now = clock.now()
    store.enqueue([_task("t")], now)
    refused = set_priority(store, "t", bad, now)  # type: ignore[arg-type]
    assert refused.refused
    assert "priority" in refused.message
    assert "Nothing changed" in refused.message
    task = store.get_task("t")
    assert task is not None
    assert task.priority == 0


def test_enqueue_sets_the_priority_and_a_spawned_child_inherits_it(
    store_url: str, clock: FakeClock
) -> None:
    """app.enqueue(priority=7) makes tasks of priority 7; a child the task
    spawns is claimed at 7 too; a bad priority is refused before anything is written."""
    app = Cairn(store_url, clock=clock)

    @app.task
    def child(ctx: Context, n: int) -> int:
        return n

    @app.task
    def parent(ctx: Context, n: int) -> int:
        return int(ctx.join(ctx.spawn(child, n=n)))

    try:
        with pytest.raises(ConfigurationError, match="priority must be an integer"):
            app.enqueue("b", parent, [{"n": 1}], priority="high")  # type: ignore[arg-type]
        assert app.store.get_task("b/n=1") is None
        app.enqueue("b", parent, [{"n": 1}], priority=7)
        report = app.run_batch("b", parent, [], progress=False)
        assert report.completed == 1
        tasks = {t.id: t.priority for t in admin(app.store).list_tasks(batch="b")}
        assert set(tasks.values()) == {7}
        assert len(tasks) == 2
    finally:
        app.close()
