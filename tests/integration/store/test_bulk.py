"""Bulk actions on a filter (``cairn.admin.bulk``) and the error-group filter of
the listing (``TaskQuery.error_type``): what a confirmation counts is what the
action then changes, one audit entry for the whole.

Every test runs on SQLite and on PostgreSQL (``store_url``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cairn import Cairn, Context
from cairn.admin.actions import CANCEL, RETRY
from cairn.admin.audit import Actor, audit_page
from cairn.admin.bulk import apply_to_query, selection
from cairn.clock import FakeClock
from cairn.store import AdminStore, admin
from cairn.store.records import NewTask
from cairn.store.reports import TaskQuery

BATCH = "nightly"
ME = Actor("ui", "ops")
VALUE_ERRORS = TaskQuery(batch=BATCH, status="failed", error_type="builtins.ValueError")


@pytest.fixture
def store(store_url: str, clock: FakeClock) -> Iterator[AdminStore]:
    """A batch of seven: two fail with ValueError, one with KeyError, four complete."""
    app = Cairn(store_url, clock=clock)

    @app.task
    def job(ctx: Context, n: int) -> int:
        def work() -> int:
            if n in (1, 2):
                raise ValueError(f"bad {n}")
            if n == 3:
                raise KeyError(n)
            return n

        return int(ctx.step("work", work))

    with app:
        app.run_batch(BATCH, job, [{"n": n} for n in range(1, 8)], progress=False)
        yield admin(app.store)


def test_an_error_group_picks_its_tasks_only(store: AdminStore) -> None:
    """``error_type`` picks the failed tasks of that error type, exactly (not a
    type whose name starts the same), and ``unknown`` those with no error."""
    assert store.count_tasks(VALUE_ERRORS) == 2
    keys = TaskQuery(batch=BATCH, error_type="builtins.KeyError")
    assert [t.id for t in store.list_tasks(query=keys)] == [f"{BATCH}/n=3"]
    assert store.count_tasks(TaskQuery(batch=BATCH, error_type="builtins.Value")) == 0
    assert store.count_tasks(TaskQuery(batch=BATCH, error_type="unknown")) == 4


def test_a_bulk_retry_changes_what_its_selection_counted(
    store: AdminStore, clock: FakeClock
) -> None:
    """The selection of a retry of the ValueError group counts 2; the retry
    moves those 2 to pending and leaves the KeyError task failed; one audit
    entry says so. A second retry finds none left."""
    picked = selection(store, RETRY, VALUE_ERRORS)
    assert (picked.count, [t.id for t in picked.sample]) == (2, [f"{BATCH}/n=1", f"{BATCH}/n=2"])
    done = apply_to_query(store, RETRY, VALUE_ERRORS, clock.now(), actor=ME)
    assert done.changed == [f"{BATCH}/n=1", f"{BATCH}/n=2"]
    statuses = {t.id: t.status for t in store.list_tasks()}
    assert statuses[f"{BATCH}/n=3"] == "failed"
    assert (statuses[f"{BATCH}/n=1"], statuses[f"{BATCH}/n=2"]) == ("pending", "pending")
    assert selection(store, RETRY, VALUE_ERRORS).count == 0
    (entry,) = audit_page(store).rows
    assert (entry.actor, entry.action, entry.count) == ("ui:ops", "retry", 2)


def test_a_bulk_cancel_counts_only_what_it_may_cancel_and_reaches_children(
    store: AdminStore, clock: FakeClock
) -> None:
    """A cancel of a whole batch counts only its unfinished tasks (none of the
    finished ones); it cancels them with their spawned children, each once."""
    now = clock.now()
    store.enqueue([NewTask(f"{BATCH}/p", "job", "{}", "json", BATCH, "p")], now)
    store.enqueue(
        [NewTask(f"{BATCH}/p/c", "job", "{}", "json", BATCH, parent_id=f"{BATCH}/p")], now
    )
    query = TaskQuery(batch=BATCH)
    assert selection(store, CANCEL, query).count == 2
    done = apply_to_query(store, CANCEL, query, now, actor=ME)
    assert done.changed == [f"{BATCH}/p"]
    assert done.children == [f"{BATCH}/p/c"]
    assert done.count == 2
    assert selection(store, CANCEL, TaskQuery(batch=BATCH, status="completed")).count == 0
