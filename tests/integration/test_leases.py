"""The lease keeper: which leases it still holds, how fresh each is, retrying
while the store is down, and stopping cleanly when the app closes."""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from cairn import Cairn, Context
from cairn.clock import FakeClock, SystemClock
from cairn.engine.leases import LeaseKeeper
from cairn.errors import StoreUnavailable
from cairn.store.records import NewTask
from cairn.store.sqlbase import SQLStore
from tests.servers import wait_until

LEASE = timedelta(seconds=10)


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


class _FlakyStore:
    """Stands for a store the heartbeat cannot reach for its first ``failures`` tries."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.asked: list[tuple[datetime, bool]] = []
        self.closed_threads = 0

    def renew_leases(self, owner: str, lease_until: datetime, *, patient: bool = True) -> Any:
        self.asked.append((lease_until, patient))
        if len(self.asked) <= self.failures:
            raise StoreUnavailable("the store is down")
        return [("t", 1)]

    def close_thread(self) -> None:
        self.closed_threads += 1


def test_the_heartbeat_retries_soon_with_a_fresh_lease_while_the_store_is_down(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """While renewing fails, the heartbeat tries again (every RETRY_SECONDS rather
    than a whole beat later; how soon after an outage is measured by the
    PostgreSQL outage acceptance test), never inside the store's own reconnect
    loop (patient=False), with a lease computed anew for each try; it warns once,
    and once more when renewing works again."""
    store = _FlakyStore(failures=3)
    keeper = LeaseKeeper(store, SystemClock(), "me/1/1/x", timedelta(seconds=1.5))  # type: ignore[arg-type]
    caplog.set_level(logging.WARNING, logger="cairn")
    keeper.hold("t", 1, SystemClock().monotonic())
    try:
        assert wait_until(lambda: len(store.asked) >= 5, 30, poll=0.01)
    finally:
        keeper.stop()
    assert all(patient is False for _, patient in store.asked)
    untils = [until for until, _ in store.asked]
    assert untils == sorted(untils)
    assert len(set(untils)) == len(untils)
    warnings = [r.getMessage() for r in caplog.records]
    assert sum("could not renew leases" in w for w in warnings) == 1
    assert sum("renewed 1 lease(s) again after" in w for w in warnings) == 1
    assert store.closed_threads == 1


def test_closing_the_app_stops_the_heartbeat_before_the_store_closes(tmp_path: Path) -> None:
    """A task that outlasts several heartbeats (lease 0.3 s), then app.close(): the
    heartbeat thread has ended when close returns, and no thread raised (it used
    to fail in close_thread after the store had closed every connection)."""
    errors: list[threading.ExceptHookArgs] = []
    previous = threading.excepthook
    threading.excepthook = errors.append
    try:
        app = Cairn(f"sqlite:///{tmp_path / 'cairn.db'}", lease=0.3)
        beats: list[datetime] = []

        def outlast_heartbeats(task_id: str) -> str:
            def renewed_twice() -> bool:
                task = app.store.get_task(task_id)
                if task is not None and task.lease_expires_at not in beats:
                    beats.append(task.lease_expires_at)  # type: ignore[arg-type]
                return len(beats) >= 3

            assert wait_until(renewed_twice, 30, poll=0.01)
            return "done"

        @app.task
        def long(ctx: Context) -> str:
            return str(ctx.step("long", outlast_heartbeats, ctx.task_id))

        assert app.run(long, task_id="long") == "done"
        app.close()
        keepers = [t for t in threading.enumerate() if t.name == "cairn-lease-keeper"]
        assert not [t for t in keepers if t.is_alive()]
    finally:
        threading.excepthook = previous
    assert errors == []


def test_renewal_of_a_store_returns_pairs(any_app: Cairn) -> None:
    """renew_leases answers (task id, fence) for every task of the owner it renewed."""
    assert isinstance(any_app.store, SQLStore)
    assert any_app.store.renew_leases(any_app.owner, any_app.leases.lease_until()) == []
    fence, _ = _claimed(any_app, "x")
    assert any_app.store.renew_leases(any_app.owner, any_app.leases.lease_until()) == [("x", fence)]
