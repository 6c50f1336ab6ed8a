"""Keyed limits (``Concurrency(n, key=...)``, ``Rate(..., key=...)``) on each
backend: counted apart for each key, exactly, by threads of one process and in
the store itself; a dead holder's permit lapses with its lease; the rows of a
key go away once they no longer count; two ``cairn worker`` processes hold it
too (the issue's scale, 4 workers and 2,100 tasks, is the slow acceptance test
``tests/acceptance/test_keyed_limits_workers.py``).

Store-level tests give times as values, so nothing there waits.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cairn import Cairn, Concurrency, Context, Rate
from cairn.limits import KEY_SEPARATOR
from cairn.retry import NO_RETRY
from cairn.store import Store
from cairn.store.sqlbase import SQLStore
from tests.acceptance.keyed_limits_app import make_app
from tests.acceptance.test_keyed_limits_workers import finish, start_worker
from tests.integration.store.conftest import Backend
from tests.tenant_server import TenantServer, call_tenant

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=10)
A, B = f"api{KEY_SEPARATOR}a", f"api{KEY_SEPARATOR}b"


@pytest.fixture
def store(store_backend: Backend) -> Iterator[Store]:
    opened = store_backend.open()
    yield opened
    opened.close()


def take(
    store: Store,
    limit: str,
    permit: str,
    now: datetime,
    *,
    capacity: int = 2,
    window: timedelta = timedelta(0),
    sweep: bool = False,
) -> object:
    """Ask for a permit of keyed limit ``limit`` (locked as ``api``)."""
    return store.acquire_permit(
        limit, capacity, window, permit, "owner", "task", now, now + LEASE,
        lock_row="api", sweep=f"api{KEY_SEPARATOR}" if sweep else None,
    )  # fmt: skip


def permit_rows(store: Store) -> list[str]:
    assert isinstance(store, SQLStore)
    return sorted(r[0] for r in store._exec("SELECT limit_name FROM permits").rows)


def test_each_key_has_its_own_permits(store: Store) -> None:
    """Two permits of key a fill it; key b still has both of its own."""
    assert take(store, A, "a1", T0) is None
    assert take(store, A, "a2", T0) is None
    assert take(store, A, "a3", T0) is not None
    assert take(store, B, "b1", T0) is None
    assert take(store, B, "b2", T0) is None
    assert take(store, B, "b3", T0) is not None


def test_a_dead_holders_keyed_permit_lapses_with_its_lease(store: Store) -> None:
    """A holder that never gives its permit back (killed) keeps its key's slot
    until its lease runs out, and not a moment after."""
    assert take(store, A, "dead", T0, capacity=1) is None
    assert take(store, A, "next", T0 + LEASE - timedelta(seconds=1), capacity=1) is not None
    assert take(store, A, "next", T0 + LEASE, capacity=1) is None


def test_a_keyed_concurrency_permit_leaves_no_row_once_given_back(store: Store) -> None:
    """A concurrency permit given back is deleted: keys used once leave nothing."""
    assert take(store, A, "a1", T0) is None
    assert take(store, B, "b1", T0) is None
    store.release_permit(A, "a1", T0, forget=True)
    store.release_permit(B, "b1", T0, forget=True)
    assert permit_rows(store) == []


def test_a_sweep_drops_the_spent_rate_permits_of_every_key(store: Store) -> None:
    """Rate permits of keys a and b count for the window after their calls end;
    once it has passed, an acquire of key c that sweeps drops them, while a
    permit of another limit whose name merely starts alike stays."""
    window = timedelta(seconds=60)
    assert take(store, A, "a1", T0, window=window) is None
    assert take(store, B, "b1", T0, window=window) is None
    store.acquire_permit("apix", 1, window, "x", "owner", "task", T0, T0 + LEASE)
    for limit, permit in ((A, "a1"), (B, "b1"), ("apix", "x")):
        store.release_permit(limit, permit, T0)
    later = T0 + window
    assert take(store, f"api{KEY_SEPARATOR}c", "c1", later, window=window, sweep=True) is None
    assert permit_rows(store) == ["api\x1fc", "apix"]


def test_keyed_concurrency_holds_for_each_tenant_across_threads(store_url: str) -> None:
    """Concurrency(2, key="tenant") over 8 threads, tenants a and b with 4 calls
    each: the server never serves more than 2 calls of one tenant at once, and 4
    calls (2 of each) do run together: each waits at a barrier for 3 others, which
    breaks if the limit counted both tenants as one."""
    app = Cairn(store_url, limits={"api": Concurrency(2, key="tenant")}, task_retry=NO_RETRY)
    together = threading.Barrier(4, timeout=60)

    def barrier_call(url: str, tenant: str, n: int) -> int:
        together.wait()
        return call_tenant(url, tenant, n)

    with TenantServer(hold=0.05) as server:

        @app.task
        def item(ctx: Context, tenant: str, n: int) -> int:
            return ctx.step("call", barrier_call, server.url, tenant, n, limit="api")

        items = [{"tenant": t, "n": n} for t in "ab" for n in range(4)]
        with app:
            report = app.run_batch("keyed", item, items, concurrency=8)
        peaks = server.peaks
    assert report.completed == 8
    assert not together.broken
    assert peaks == {"a": 2, "b": 2}


def test_a_step_sets_the_key_and_a_key_function_finds_one(store_url: str) -> None:
    """limit=("api", key) counts the call under the step's key; key=<function>
    computes it from the task's arguments. Both hold per key: one at a time here."""
    limits: dict[str, Concurrency | Rate] = {
        "api": Concurrency(1, key=lambda args: args["account"]["tenant"]),
        "by_step": Rate(100, per=1, key="unused"),
    }
    app = Cairn(store_url, limits=limits, task_retry=NO_RETRY)
    with TenantServer(hold=0.02) as server:

        @app.task
        def item(ctx: Context, account: dict[str, str], n: int) -> int:
            ctx.step("keyed", call_tenant, server.url, account["tenant"], n, limit="api")
            return ctx.step("own", call_tenant, server.url, "s", n, limit=("by_step", "k"))

        items = [{"account": {"tenant": t}, "n": n} for t in "xy" for n in range(3)]
        with app:
            report = app.run_batch("fn", item, items, concurrency=6)
        peaks, order = server.peaks, server.order
    assert report.completed == 6
    assert (peaks["x"], peaks["y"]) == (1, 1)
    assert sorted(t for t, _ in order) == ["s"] * 6 + ["x"] * 3 + ["y"] * 3


@pytest.mark.requires("multi_process")
def test_keyed_concurrency_holds_across_worker_processes(store_url: str, tmp_path: Path) -> None:
    """Two ``cairn worker`` processes of 3 threads each, tenants a and b with 10
    calls each under Concurrency(2, key="tenant"): the server never serves more
    than 2 calls of one tenant at once, and every call is made exactly once."""
    created, task = make_app(store_url)
    with created:
        for tenant in "ab":
            created.enqueue(tenant, task, [{"tenant": tenant, "n": n} for n in range(10)])
    with TenantServer(hold=0.03) as server:
        env = {"CAIRN_TEST_API_URL": server.url, "CAIRN_TEST_STARTED": str(tmp_path / "s")}
        logs = [tmp_path / f"w{i}.log" for i in range(2)]
        workers = [start_worker(store_url, log, env, concurrency=3) for log in logs]
        try:
            for process, log in zip(workers, logs, strict=True):
                finish(process, log)
        finally:
            for process in workers:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        peaks, order = server.peaks, server.order
    assert max(peaks.values()) <= 2, peaks
    assert Counter(order) == Counter((t, str(n)) for t in "ab" for n in range(10))
