"""Stall alerts: one post per stall, even across watcher restarts; one recovery
post when the task moves again or finishes; a webhook that is down is retried.

Every test here runs on each backend (the conformance suite).
"""

from __future__ import annotations

from datetime import timedelta

from cairn import Cairn
from cairn.clock import FakeClock
from cairn.observe.notifiers import Notifier, SlackNotifier, WebhookNotifier
from cairn.observe.stalls import StallWatcher
from cairn.store.records import NewTask, StepRecord, TaskRecord
from tests.servers import WebhookServer

STALL_AFTER = 15 * 60.0


def start_running(app: Cairn, clock: FakeClock, task_id: str) -> TaskRecord:
    """A task claimed by a worker elsewhere that holds its lease (it is alive but
    makes no progress)."""
    app.store.create_task(NewTask(task_id, "crawl", "{}", "json", batch=None), clock.now())
    lease = clock.now() + timedelta(days=1)
    claimed = app.store.claim_task(task_id, 0, "busy-host/7/0/n", lease, clock.now())
    assert claimed is not None
    return claimed


def checkpoint(app: Cairn, clock: FakeClock, task: TaskRecord, seq: int) -> None:
    """The task's worker records a finished step: progress."""
    now = clock.now()
    step = StepRecord(
        task.id, seq, "step", f"s{seq}", "completed", "1", 1, 0, 1, None, None, now, now
    )
    assert app.store.record_step(step, task.fence)


def test_alerted_once_then_recovered_once(any_app: Cairn, clock: FakeClock) -> None:
    """Checked many times, and by a second watcher started on the same store (a
    restart), a stall is posted once; after progress, one recovery is posted."""
    task = start_running(any_app, clock, "crawl/1")
    with WebhookServer() as chat:
        watcher = StallWatcher(any_app, [SlackNotifier(chat.url)], stall_after=STALL_AFTER)
        assert watcher.check().raised == []
        clock.advance(STALL_AFTER - 1)
        assert watcher.check().stalls == []
        clock.advance(2)
        assert watcher.check().raised == ["crawl/1"]
        for _ in range(3):
            assert watcher.check().raised == []
        restarted = Cairn(any_app.store.url, clock=clock)
        try:
            again = StallWatcher(restarted, [SlackNotifier(chat.url)], stall_after=STALL_AFTER)
            assert again.check().raised == []
            assert len(chat.delivered) == 1
            assert "crawl/1" in chat.delivered[0].json()["text"]
            checkpoint(any_app, clock, task, 0)
            # The restarted watcher clears the alert the first one raised.
            assert again.check().cleared == ["crawl/1"]
            assert again.check().cleared == []
        finally:
            restarted.close()
        assert watcher.check().cleared == []
    texts = [post.json()["text"] for post in chat.posts]
    assert len(texts) == 2
    assert "no progress" in texts[0]
    assert "moving again" in texts[1]


def test_stalls_again_after_progress_is_a_new_alert(any_app: Cairn, clock: FakeClock) -> None:
    """Progress then another long silence is a second stall, alerted once more;
    a task that finishes clears its stall."""
    task = start_running(any_app, clock, "crawl/2")
    with WebhookServer() as hook:
        watcher = StallWatcher(any_app, [WebhookNotifier(hook.url)], stall_after=STALL_AFTER)
        clock.advance(STALL_AFTER + 1)
        watcher.check()
        checkpoint(any_app, clock, task, 0)
        watcher.check()
        clock.advance(STALL_AFTER + 1)
        assert watcher.check().raised == ["crawl/2"]
        assert any_app.store.finish_task(task.id, task.fence, "completed", "1", None, clock.now())
        assert watcher.check().cleared == ["crawl/2"]
        kinds = [post.json()["kind"] for post in hook.delivered]
        assert kinds == ["stall", "recovered", "stall", "recovered"]
        assert {post.json()["task_id"] for post in hook.delivered} == {"crawl/2"}
        assert len({post.headers["idempotency-key"] for post in hook.delivered}) == 4


def test_a_hashed_id_is_named_by_its_key_as_given_in_stall_and_recovery(
    any_app: Cairn, clock: FakeClock
) -> None:
    """A task whose arguments cairn hashed into its id (a slash and a space) is
    named in the stall's and the recovery's text and headline by its arguments
    as given, its id after them, as the task list shows it; the webhook's
    ``task_id`` field stays the id."""
    task_id = "crawl/sha256:0f3a9c1d2e4b5a6c"
    new = NewTask(
        task_id, "crawl", '{"url": "a b/c"}', "json", batch=None, item_key="sha256:0f3a9c1d2e4b5a6c"
    )
    any_app.store.create_task(new, clock.now())
    lease = clock.now() + timedelta(days=1)
    task = any_app.store.claim_task(task_id, 0, "busy-host/7/0/n", lease, clock.now())
    assert task is not None
    label = f"url=a b/c ({task_id})"
    with WebhookServer() as chat, WebhookServer() as hook:
        notifiers: list[Notifier] = [SlackNotifier(chat.url), WebhookNotifier(hook.url)]
        watcher = StallWatcher(any_app, notifiers, stall_after=STALL_AFTER)
        clock.advance(STALL_AFTER + 1)
        assert watcher.check().raised == [task_id]
        checkpoint(any_app, clock, task, 0)
        assert watcher.check().cleared == [task_id]
        slack = [post.json() for post in chat.delivered]
        generic = [post.json() for post in hook.delivered]
    headers = [post["blocks"][0]["text"]["text"] for post in slack]
    assert headers == [f"Stalled: {label}", f"Moving again: {label}"]
    assert [f"cairn: task {label} " in post["text"] for post in slack] == [True, True]
    assert [post["kind"] for post in generic] == ["stall", "recovered"]
    assert all(f"cairn: task {label} " in post["text"] for post in generic)
    assert {post["task_id"] for post in generic} == {task_id}
