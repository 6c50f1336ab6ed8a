"""Debounced and singleton enqueues (docs/debounce.md), on SQLite and PostgreSQL.

A debounced task waits until no event of its key came for its window, then
runs once with the last event's arguments; a singleton key has at most one
task pending, running or waiting, and a second is dropped or queued behind it.
The races between processes are in tests/integration/test_debounce_races.py.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from cairn import Cairn, Context
from cairn.clock import FakeClock
from cairn.errors import ConfigurationError, InvalidName, TaskArgumentsError, TaskConflict
from cairn.store import admin
from cairn.worker import Worker


def _app(any_app: Cairn, ran: list[dict[str, Any]]) -> Any:
    @any_app.task(name="reindex")
    def reindex(ctx: Context, doc: str, rev: int) -> int:
        ran.append({"doc": doc, "rev": rev})
        return rev

    return reindex


def _by_doc(item: Any) -> str:
    return str(item["doc"])


def test_a_debounced_task_runs_once_with_the_last_events_arguments_after_a_quiet_window(
    any_app: Cairn, clock: FakeClock
) -> None:
    """Five events of one key 10 s apart, window 60 s: one task, its arguments
    the last event's, not run 59 s after the last event, run once at 60 s."""
    ran: list[dict[str, Any]] = []
    reindex = _app(any_app, ran)
    answers = []
    for rev in range(5):
        answers.append(
            any_app.submit("docs", reindex, {"doc": "a", "rev": rev}, key=_by_doc, debounce=60)
        )
        clock.advance(10)
    assert [a.outcome for a in answers] == ["new"] + ["debounced"] * 4
    assert [a.events for a in answers] == [1, 2, 3, 4, 5]
    assert len({a.task_id for a in answers}) == 1
    task = any_app.store.get_task(answers[0].task_id)
    assert task is not None
    assert task.status == "waiting"
    assert task.debounce_key == "docs/a"
    assert task.debounce_ms == 60_000
    assert task.debounce_events == 5
    clock.advance(49)  # 59 s after the last event
    Worker(any_app, burst=True).run()
    assert ran == []
    clock.advance(1)
    Worker(any_app, burst=True).run()
    assert ran == [{"doc": "a", "rev": 4}]
    done = any_app.store.get_task(answers[0].task_id)
    assert done is not None
    assert done.status == "completed"


def test_an_event_after_the_debounced_task_started_makes_the_next_one(
    any_app: Cairn, clock: FakeClock
) -> None:
    """Once the key's task has run, the next event opens a new window and a new
    task, which runs with its own arguments; other keys have their own tasks."""
    ran: list[dict[str, Any]] = []
    reindex = _app(any_app, ran)
    first = any_app.submit("docs", reindex, {"doc": "a", "rev": 1}, key=_by_doc, debounce=5)
    other = any_app.submit("docs", reindex, {"doc": "b", "rev": 1}, key=_by_doc, debounce=5)
    assert other.task_id != first.task_id
    assert other.outcome == "new"
    clock.advance(5)
    Worker(any_app, burst=True).run()
    second = any_app.submit("docs", reindex, {"doc": "a", "rev": 2}, key=_by_doc, debounce=5)
    assert second.outcome == "new"
    assert second.task_id != first.task_id
    clock.advance(5)
    Worker(any_app, burst=True).run()
    assert sorted((r["doc"], r["rev"]) for r in ran) == [("a", 1), ("a", 2), ("b", 1)]


def test_enqueue_with_debounce_sends_each_item_as_an_event_in_order(
    any_app: Cairn, clock: FakeClock
) -> None:
    """``enqueue(..., debounce=)`` sends its items in order: three items of one
    key make one task (the answer: 1 made), with the third's arguments."""
    ran: list[dict[str, Any]] = []
    reindex = _app(any_app, ran)
    items = [{"doc": "a", "rev": rev} for rev in (1, 2, 3)]
    assert any_app.enqueue("docs", reindex, items, key=_by_doc, debounce=timedelta(seconds=2)) == 1
    clock.advance(2)
    Worker(any_app, burst=True).run()
    assert ran == [{"doc": "a", "rev": 3}]


def test_a_second_singleton_task_is_dropped_and_the_answer_names_the_holder(
    any_app: Cairn, clock: FakeClock
) -> None:
    """``on_conflict="drop"``: while the key's task is pending, another event
    makes nothing and answers with the holder's id; after the holder ended, the
    next event makes a new holder."""
    ran: list[dict[str, Any]] = []
    reindex = _app(any_app, ran)
    held = any_app.submit("docs", reindex, {"doc": "a", "rev": 1}, singleton="sync/a")
    dropped = any_app.submit("docs", reindex, {"doc": "a", "rev": 2}, singleton="sync/a")
    assert held.outcome == "new"
    assert dropped.outcome == "dropped"
    assert dropped.task_id == held.task_id
    Worker(any_app, burst=True).run()
    assert ran == [{"doc": "a", "rev": 1}]
    again = any_app.submit("docs", reindex, {"doc": "a", "rev": 3}, singleton="sync/a")
    assert again.outcome == "new"
    assert again.task_id != held.task_id


def test_queued_singleton_tasks_run_one_after_another_in_the_order_sent(
    any_app: Cairn, clock: FakeClock
) -> None:
    """``on_conflict="queue"``: three tasks of one key; the later two wait (not
    claimable) until the one before has ended, then run in the order sent."""
    ran: list[dict[str, Any]] = []
    reindex = _app(any_app, ran)
    answers = [
        any_app.submit(
            "docs", reindex, {"doc": "a", "rev": rev}, singleton="k", on_conflict="queue"
        )
        for rev in (1, 2, 3)
    ]
    assert [a.outcome for a in answers] == ["new", "queued", "queued"]
    queued = any_app.store.get_task(answers[1].task_id)
    assert queued is not None
    assert queued.status == "waiting"
    assert queued.singleton_queued == "k"
    now = clock.now()
    claimed = any_app.store.claim_next_pending("docs", "me", now + timedelta(minutes=1), now)
    assert claimed is not None
    assert claimed.id == answers[0].task_id
    assert any_app.store.claim_next_pending("docs", "me", now + timedelta(minutes=1), now) is None
    any_app.store.release_task(claimed.id, claimed.fence, now)
    Worker(any_app, burst=True).run()
    assert [r["rev"] for r in ran] == [1, 2, 3]


def test_cancelling_the_holder_hands_the_key_to_the_next_queued_task(
    any_app: Cairn, clock: FakeClock
) -> None:
    """A holder cancelled while pending hands the key on at once: the next
    queued task is pending, holds the key, and runs; the cancelled one never."""
    ran: list[dict[str, Any]] = []
    reindex = _app(any_app, ran)
    first, second = (
        any_app.submit(
            "docs", reindex, {"doc": "a", "rev": rev}, singleton="k", on_conflict="queue"
        )
        for rev in (1, 2)
    )
    assert admin(any_app.store).cancel_task(first.task_id, clock.now())
    moved = any_app.store.get_task(second.task_id)
    assert moved is not None
    assert moved.status == "pending"
    assert moved.singleton_key == "k"
    Worker(any_app, burst=True).run()
    assert ran == [{"doc": "a", "rev": 2}]


@pytest.mark.parametrize(
    ("options", "error", "says"),
    [
        ({"singleton": "a\x00b"}, InvalidName, "NUL"),
        ({"singleton": "k" * 1001}, InvalidName, "long"),
        ({"singleton": "  "}, InvalidName, "blank"),
        ({"singleton": 7}, ConfigurationError, "str key"),
        ({"debounce": 0}, ConfigurationError, "out of range"),
        ({"debounce": float("nan")}, ConfigurationError, "out of range"),
        ({"debounce": "5s"}, ConfigurationError, "number of seconds"),
        ({"debounce": 5, "singleton": "k"}, ConfigurationError, "not both"),
        ({"singleton": "k", "on_conflict": "replace"}, ConfigurationError, "'drop'"),
        ({"on_conflict": "queue"}, ConfigurationError, "singleton= tasks only"),
    ],
)
def test_bad_debounce_and_singleton_options_are_refused_before_anything_is_written(
    any_app: Cairn, options: dict[str, Any], error: type[Exception], says: str
) -> None:
    """Each bad option is refused with an error saying what is wrong, and no
    task (nor batch) is written."""
    reindex = _app(any_app, [])
    with pytest.raises(error, match=says):
        any_app.enqueue("docs", reindex, [{"doc": "a", "rev": 1}], **options)
    assert any_app.store.batch_task_name("docs") is None


def test_a_retry_takes_the_singleton_key_again_and_is_refused_while_another_holds_it(
    any_app: Cairn, clock: FakeClock
) -> None:
    """A cancelled holder, retried while a newer task holds its key: refused
    with TaskConflict, nothing changed; retried once that task has ended: it
    holds the key again and runs. A queued task cancelled and retried takes
    the key it was queued behind."""
    ran: list[dict[str, Any]] = []
    reindex = _app(any_app, ran)
    store = admin(any_app.store)
    first = any_app.submit("docs", reindex, {"doc": "a", "rev": 1}, singleton="k")
    assert store.cancel_task(first.task_id, clock.now())
    any_app.submit("docs", reindex, {"doc": "a", "rev": 2}, singleton="k")
    queued = any_app.submit(
        "docs", reindex, {"doc": "a", "rev": 3}, singleton="k", on_conflict="queue"
    )
    assert store.cancel_task(queued.task_id, clock.now())
    with pytest.raises(TaskConflict, match="singleton key is held"):
        store.retry_task(first.task_id, clock.now())
    unchanged = store.get_task(first.task_id)
    assert unchanged is not None
    assert unchanged.status == "cancelled"
    Worker(any_app, burst=True).run()  # runs the second
    assert store.retry_task(first.task_id, clock.now())
    with pytest.raises(TaskConflict):
        store.retry_task(queued.task_id, clock.now())
    Worker(any_app, burst=True).run()
    assert store.retry_task(queued.task_id, clock.now())
    retried = store.get_task(queued.task_id)
    assert retried is not None
    assert (retried.singleton_key, retried.singleton_queued) == ("k", None)
    Worker(any_app, burst=True).run()
    assert [r["rev"] for r in ran] == [2, 1, 3]


def test_a_signal_does_not_wake_a_queued_task_and_a_waiting_holder_keeps_its_key(
    any_app: Cairn, clock: FakeClock
) -> None:
    """A holder waiting inside the task (``ctx.wait_for``) still holds the key:
    a new event is dropped. The signal sent to a task queued behind it leaves it
    queued and is kept for it: once the holder is signalled and has ended, the
    queued task runs and finds its signal."""
    ran: list[int] = []

    @any_app.task(name="waiter")
    def waiter(ctx: Context, rev: int) -> None:
        ctx.wait_for("go")
        ran.append(rev)

    holder = any_app.submit("waits", waiter, {"rev": 1}, singleton="k")
    Worker(any_app, burst=True).run()
    waiting = any_app.store.get_task(holder.task_id)
    assert waiting is not None
    assert waiting.status == "waiting"
    assert any_app.submit("waits", waiter, {"rev": 2}, singleton="k").outcome == "dropped"
    queued = any_app.submit("waits", waiter, {"rev": 3}, singleton="k", on_conflict="queue")
    any_app.signal(queued.task_id, "go")
    still = any_app.store.get_task(queued.task_id)
    assert still is not None
    assert still.status == "waiting"
    Worker(any_app, burst=True).run()
    assert ran == []
    any_app.signal(holder.task_id, "go")
    Worker(any_app, burst=True).run()
    assert ran == [1, 3]


def test_a_list_of_events_is_checked_whole_before_any_is_sent(any_app: Cairn) -> None:
    """``enqueue(..., singleton=)`` with a list whose second item does not fit the
    task: refused, and the first was not sent either."""
    reindex = _app(any_app, [])
    items: list[dict[str, Any]] = [{"doc": "a", "rev": 1}, {"doc": "b"}]
    with pytest.raises(TaskArgumentsError):
        any_app.enqueue("docs", reindex, items, singleton="k")
    assert any_app.store.batch_task_name("docs") is None
