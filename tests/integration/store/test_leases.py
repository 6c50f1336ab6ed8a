"""The lease keeper: which leases it still holds, how fresh each is, retrying
while the store is down, and stopping cleanly when the app closes.

Every test here runs on each backend (the conformance suite).
"""

from __future__ import annotations

from cairn import Cairn, Context
from cairn.clock import FakeClock
from cairn.store.records import NewTask
from cairn.store.sqlbase import SQLStore


def _claimed(app: Cairn, task_id: str) -> tuple[int, float]:
    """Claim a new task for ``app``'s owner as the engine does; (fence, sent_at)."""
    app.store.create_task(NewTask(task_id, "job", "{}", "json"), app.clock.now())
    sent_at, until = app.leases.stamp()
    claimed = app.store.claim_task(task_id, 0, app.owner, until, app.clock.now())
    assert claimed is not None
    app.leases.hold(task_id, claimed.fence, sent_at)
    return claimed.fence, sent_at


def test_a_lease_is_fresh_for_half_a_lease_then_renewed_fenced(
    any_app: Cairn, clock: FakeClock
) -> None:
    """A claimed task's lease is fresh until half a lease has passed on the
    monotonic clock since the claim was sent; renew_now then renews it (and it is
    fresh again), unless another owner has taken the task: then it is refused."""
    fence, _ = _claimed(any_app, "t")
    keeper = any_app.leases
    assert keeper.fresh("t", fence)
    assert not keeper.fresh("t", fence + 1)
    clock.advance(any_app.leases.lease.total_seconds() / 2 + 0.1)
    assert not keeper.fresh("t", fence)
    assert keeper.renew_now("t", fence)
    assert keeper.fresh("t", fence)
    task = any_app.store.get_task("t")
    assert task is not None
    taken = any_app.store.claim_task(
        "t", fence, "other/1/1/x", clock.now(), clock.now(), owner_gone=True
    )
    assert taken is not None
    assert not keeper.renew_now("t", fence)


def test_the_heartbeat_confirms_only_the_leases_it_renewed(any_app: Cairn) -> None:
    """The renewal statement answers which tasks it renewed: a task another owner
    took is absent, so the keeper does not count it as confirmed."""
    fence_a, _ = _claimed(any_app, "a")
    fence_b, _ = _claimed(any_app, "b")
    assert any_app.store.claim_task(
        "b", fence_b, "other/1/1/x", any_app.clock.now(), any_app.clock.now(), owner_gone=True
    )
    renewed = any_app.store.renew_leases(any_app.owner, any_app.leases.lease_until())
    assert renewed == [("a", fence_a)]


def test_renewal_of_a_store_returns_pairs(any_app: Cairn) -> None:
    """renew_leases answers (task id, fence) for every task of the owner it renewed."""
    assert isinstance(any_app.store, SQLStore)
    assert any_app.store.renew_leases(any_app.owner, any_app.leases.lease_until()) == []
    fence, _ = _claimed(any_app, "x")
    assert any_app.store.renew_leases(any_app.owner, any_app.leases.lease_until()) == [("x", fence)]


def test_a_lease_unconfirmed_for_half_a_lease_is_renewed_before_the_next_step(
    store_url: str, clock: FakeClock
) -> None:
    """The heartbeat could not renew (here: half a lease passes inside a step on
    the clock, before the heartbeat's next beat): at the next step boundary the
    task renews its own lease, fenced, before it starts that step, so a task
    whose lease may have lapsed never starts work its taker would run again."""
    app = Cairn(store_url, clock=clock, poll_interval=0.0)
    lease = app.leases.lease
    expiry_seen: list[object] = []

    def first() -> int:
        clock.advance(lease.total_seconds() / 2 + 1)
        return 1

    def second(task_id: str) -> int:
        task = app.store.get_task(task_id)
        assert task is not None
        expiry_seen.append(task.lease_expires_at)
        return 2

    @app.task
    def job(ctx: Context) -> int:
        return ctx.step("first", first) + ctx.step("second", second, ctx.task_id)

    try:
        assert app.run(job, task_id="job") == 3
    finally:
        app.close()
    assert expiry_seen == [clock.now() + lease]
