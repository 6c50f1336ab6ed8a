"""Fair claims between batches (docs/workers.md, "Fairness"), on each backend.

A worker serving every batch claims round-robin: at the highest pending priority,
the next batch (by name) after the one it claimed from last, and, as each
round's last turn, the oldest task of any batch. So a batch of 3 enqueued after
a batch of 20 has its tasks claimed among the first few claims, not after the
20; a higher priority still comes first. The rounds here are those of
``cairn.engine.claim.Claimer``, driven the way it drives the store.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from cairn.store import Store
from cairn.store.records import NewTask
from tests.integration.store.conftest import Backend

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
LEASE_UNTIL = NOW + timedelta(seconds=30)


@pytest.fixture
def store(store_backend: Backend) -> Iterator[Store]:
    opened = store_backend.open()
    yield opened
    opened.close()


def add(store: Store, batch: str | None, count: int, *, priority: int = 0) -> None:
    tasks = [
        NewTask(f"{batch}/{i}", "job", "{}", "json", batch, str(i), priority=priority)
        for i in range(count)
    ]
    store.enqueue(tasks, NOW)


def claim_all(store: Store) -> list[str]:
    """Claim until nothing is pending, as a worker's Claimer does; the ids in order."""
    after, claimed = "", []
    while task := store.claim_next_pending(None, "me", LEASE_UNTIL, NOW, after_batch=after):
        claimed.append(task.id)
        after = task.batch if task.batch is not None and task.batch > after else ""
    return claimed


def test_a_small_batch_is_not_queued_behind_a_big_one(store: Store) -> None:
    """Batch 'big' (20 tasks) enqueued before batch 'small' (3): each round of
    claims takes one task of each batch, then the oldest task; the small
    batch's third task is the 8th claim, not the 23rd."""
    add(store, "big", 20)
    add(store, "small", 3)
    order = claim_all(store)
    assert order[:9] == [
        "big/0", "small/0", "big/1",
        "big/2", "small/1", "big/3",
        "big/4", "small/2", "big/5",
    ]  # fmt: skip
    assert sorted(order) == sorted(
        [f"big/{i}" for i in range(20)] + ["small/0", "small/1", "small/2"]
    )


def test_the_order_of_names_does_not_starve_the_later_batch(store: Store) -> None:
    """The big batch named last ('z') and enqueued first: the round still comes
    back to 'a' after 'z' (the oldest task is only the round's last turn)."""
    add(store, "z", 10)
    add(store, "a", 2)
    order = claim_all(store)
    assert order.index("a/1") < 6


def test_priority_still_comes_first_across_batches(store: Store) -> None:
    """A task of higher priority is claimed before any other, whatever the
    round; fairness is between batches at the same priority."""
    add(store, "big", 5)
    add(store, "small", 2)
    store.enqueue([NewTask("urgent/0", "job", "{}", "json", "urgent", "0", priority=5)], NOW)
    order = claim_all(store)
    assert order[0] == "urgent/0"
    # After 'urgent' no batch follows at priority 0: the round's last turn (the
    # oldest task), then a new round from the first batch.
    assert order[1:5] == ["big/0", "big/1", "small/0", "big/2"]


def test_a_task_of_no_batch_gets_the_rounds_last_turn(store: Store) -> None:
    """A task of no batch, enqueued first, is the oldest: the first round's last turn."""
    store.enqueue([NewTask("loose", "job", "{}", "json")], NOW)
    add(store, "b", 3)
    assert claim_all(store)[:3] == ["b/0", "loose", "b/1"]
