"""The lease keeper: which leases it still holds, how fresh each is, retrying
while the store is down, and stopping cleanly when the app closes.

The tests on every backend are in ``store/test_leases.py``.
"""

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
from tests.servers import wait_until

LEASE = timedelta(seconds=10)


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


class _SuspendedClock(FakeClock):
    """The clock of a machine that can be suspended: while it sleeps its
    monotonic clock stands still (Linux's CLOCK_MONOTONIC, macOS's too), and
    its wall clock, set again on waking, moves on."""

    def __init__(self) -> None:
        super().__init__()
        self.suspended = 0.0

    def monotonic(self) -> float:
        return super().monotonic() - self.suspended

    def suspend(self, seconds: float) -> None:
        self.advance(seconds)
        self.suspended += seconds


def test_a_lease_is_not_fresh_after_the_machine_slept_past_half_a_lease() -> None:
    """A lease confirmed just before the machine was suspended for longer than
    half a lease is not fresh when it wakes, though its monotonic clock did not
    move: the wall clock, by which another process judges the lease lapsed,
    says how long it slept. A process stopped (not suspended) is judged by
    either clock alike."""
    clock = _SuspendedClock()
    keeper = LeaseKeeper(_FlakyStore(failures=0), clock, "me/1/1/x", LEASE)  # type: ignore[arg-type]
    sent_at, until = keeper.stamp()
    keeper.hold("t", 1, sent_at, until)
    try:
        assert keeper.fresh("t", 1)
        clock.suspend(LEASE.total_seconds() * 3)
        assert clock.monotonic() == sent_at
        assert not keeper.fresh("t", 1)
        keeper.hold("u", 2, *keeper.stamp())
        clock.advance(LEASE.total_seconds() / 2)
        assert not keeper.fresh("u", 2)
    finally:
        keeper.stop()
