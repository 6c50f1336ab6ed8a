"""Batches: idempotent enqueue, skip-what-is-done reruns, streaming, keys, reports,
and real parallelism. Every test runs on SQLite and on PostgreSQL (``any_app``)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from cairn import Cairn, Context, Permanent
from cairn.store import admin
from cairn.store.sqlbase import ENQUEUE_CHUNK
from cairn.task import TaskDef

# One full enqueue chunk, then a partial one: enough to see streaming, and quick
# on PostgreSQL too (each task there costs a few round trips).
BATCH_SIZE = ENQUEUE_CHUNK + 100


@pytest.fixture
def calls() -> Counter[str]:
    return Counter()


@pytest.fixture
def review(any_app: Cairn, calls: Counter[str]) -> TaskDef[[str], str]:
    """A one-step task that counts how often its step really runs."""

    def fetch(app_id: str) -> str:
        calls[app_id] += 1
        return f"settings of {app_id}"

    @any_app.task
    def review(ctx: Context, app_id: str) -> str:
        result: str = ctx.step("fetch", fetch, app_id)
        return result

    return review


def _items(*names: str) -> list[dict[str, Any]]:
    return [{"app_id": name} for name in names]


def test_enqueueing_the_same_items_twice_adds_no_duplicates(
    any_app: Cairn, review: TaskDef[[str], str]
) -> None:
    """Items already in the batch are skipped; only new ones become tasks."""
    assert any_app.enqueue("apps", review, _items("a1", "a2", "a3")) == 3
    assert any_app.enqueue("apps", review, _items("a1", "a2", "a3")) == 0
    assert any_app.enqueue("apps", review, _items("a3", "a4")) == 1
    ids = [t.id for t in admin(any_app.store).list_tasks(batch="apps")]
    assert ids == ["apps/app_id=a1", "apps/app_id=a2", "apps/app_id=a3", "apps/app_id=a4"]


def test_running_a_finished_batch_again_runs_nothing(
    any_app: Cairn, review: TaskDef[[str], str], calls: Counter[str]
) -> None:
    """A second ``run_batch`` of a finished batch skips every task and calls no step."""
    items = _items("a1", "a2", "a3", "a4", "a5")
    first = any_app.run_batch("apps", review, items, progress=False)
    assert (first.total, first.ran, first.skipped, first.completed) == (5, 5, 0, 5)

    again = any_app.run_batch("apps", review, items, progress=False)
    assert (again.total, again.ran, again.skipped, again.completed) == (5, 0, 5, 5)
    assert again.ok
    assert calls == Counter(["a1", "a2", "a3", "a4", "a5"])


def _count_tasks(app: Cairn, batch: str) -> int:
    """How many tasks of ``batch`` the store holds, read through the store API."""
    return sum(app.store.batch_counts(batch).values())


def test_a_generator_of_items_is_streamed_into_the_store(
    any_app: Cairn, review: TaskDef[[str], str], calls: Counter[str]
) -> None:
    """A generator of 600 items (more than one enqueue chunk) is written in chunks
    as it is read (tasks are in the store before the generator is exhausted) and
    every item becomes a task that runs."""
    stored_before_last: list[int] = []

    def items() -> Iterator[dict[str, Any]]:
        for n in range(BATCH_SIZE):
            if n == BATCH_SIZE - 1:
                stored_before_last.append(_count_tasks(any_app, "apps"))
            yield {"app_id": f"a{n}"}

    report = any_app.run_batch("apps", review, items(), progress=False)
    assert stored_before_last[0] > 0, "the whole generator was read before any write"
    assert (report.total, report.ran, report.completed) == (BATCH_SIZE, BATCH_SIZE, BATCH_SIZE)
    assert _count_tasks(any_app, "apps") == BATCH_SIZE
    assert len(calls) == BATCH_SIZE
    assert set(calls.values()) == {1}


def test_a_custom_key_names_the_tasks(any_app: Cairn, calls: Counter[str]) -> None:
    """``key=`` turns an item into its task's key, so tasks of nested items get
    readable ids and the same key is the same task."""

    @any_app.task
    def sync(ctx: Context, account: dict[str, Any]) -> str:
        calls[account["id"]] += 1
        return str(account["id"])

    accounts = [{"account": {"id": f"acc{n}", "region": "jp"}} for n in range(3)]
    report = any_app.run_batch(
        "accounts", sync, accounts, key=lambda item: item["account"]["id"], progress=False
    )
    assert report.completed == 3
    tasks = list(admin(any_app.store).list_tasks(batch="accounts"))
    assert [(t.id, t.item_key) for t in tasks] == [
        (f"accounts/acc{n}", f"acc{n}") for n in range(3)
    ]
    assert any_app.enqueue("accounts", sync, accounts, key=lambda item: item["account"]["id"]) == 0
    assert any_app.run(sync, task_id="accounts/acc1", account=accounts[1]["account"]) == "acc1"
    assert calls == Counter({"acc0": 1, "acc1": 1, "acc2": 1})


def test_the_report_counts_what_happened(any_app: Cairn) -> None:
    """The report gives totals, what ran, what completed and failed, and each failure
    with its error type and message."""

    @any_app.task
    def check(ctx: Context, n: int) -> int:
        if n % 3 == 0:
            raise Permanent(f"item {n} is invalid")
        return n

    report = any_app.run_batch("checks", check, [{"n": n} for n in range(1, 7)], progress=False)
    assert (report.total, report.ran, report.skipped) == (6, 6, 0)
    assert (report.completed, report.failed, report.cancelled) == (4, 2, 0)
    assert report.counts == {"completed": 4, "failed": 2}
    assert not report.ok
    failures = sorted((f.task_id, f.error_type, f.message) for f in report.failures)
    assert failures == [
        ("checks/n=3", "cairn.errors.Permanent", "item 3 is invalid"),
        ("checks/n=6", "cairn.errors.Permanent", "item 6 is invalid"),
    ]
    assert report.elapsed_seconds >= 0

    again = any_app.run_batch("checks", check, progress=False)
    assert (again.total, again.ran, again.skipped, again.failed, again.failures) == (6, 0, 6, 2, [])


def test_concurrency_runs_tasks_in_parallel_threads(any_app: Cairn) -> None:
    """With ``concurrency=3``, three tasks are inside their steps at the same time,
    each on its own thread, and never more than three."""
    barrier = threading.Barrier(3, timeout=20)
    lock = threading.Lock()
    active = 0
    most_active = 0
    threads: set[str] = set()

    def meet() -> None:
        nonlocal active, most_active
        with lock:
            active += 1
            most_active = max(most_active, active)
            threads.add(threading.current_thread().name)
        try:
            barrier.wait()  # passes only when three tasks run at once
        finally:
            with lock:
                active -= 1

    @any_app.task
    def parallel(ctx: Context, n: int) -> int:
        ctx.step("meet", meet)
        return n

    report = any_app.run_batch(
        "parallel", parallel, [{"n": n} for n in range(6)], concurrency=3, progress=False
    )
    assert report.failures == []
    assert report.completed == 6
    assert most_active == 3
    assert len(threads) == 3


def test_concurrency_below_one_is_refused(any_app: Cairn, review: TaskDef[[str], str]) -> None:
    """``concurrency=0`` is a ValueError, raised before anything is enqueued."""
    with pytest.raises(ValueError, match="concurrency must be at least 1"):
        any_app.run_batch("apps", review, _items("a1"), concurrency=0, progress=False)
    assert list(admin(any_app.store).list_tasks()) == []
