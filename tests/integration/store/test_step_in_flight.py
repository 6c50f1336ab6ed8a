"""The step in flight: what a running task is doing now, and since when, as its
owner's lease heartbeat notes it (schema 9), on the task page's view, the
stall check and the stall alert.

Every test here runs on each backend (the conformance suite).
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from cairn import Cairn, Context
from cairn.admin.views import task_view
from cairn.clock import FakeClock
from cairn.observe.notifiers import WebhookNotifier
from cairn.observe.stalls import StallWatcher
from cairn.store import admin
from cairn.store.records import InFlightNote, NewTask
from tests.servers import WebhookServer, wait_until

# A short lease: the heartbeat (a third of it) notes the step within 0.2 s.
LEASE = 0.6


def test_a_long_step_shows_as_in_flight_until_it_ends(store_url: str) -> None:
    """While a task's second step runs, its view and the running tasks' list
    name that step, its position and when it began; a stall alert sent then
    says which step and for how long (text and webhook fields); once the step
    and the task end, no step is in flight."""
    release = threading.Event()
    app = Cairn(store_url, lease=LEASE)

    @app.task(name="crawl")
    def crawl(ctx: Context) -> int:
        first: int = ctx.step("fetch", lambda: 1)
        return first + int(ctx.step("analyze", lambda: release.wait(30)))

    tools = admin(app.store)
    with app:
        before = datetime.now(UTC)
        runner = threading.Thread(target=app.run, args=(crawl,), kwargs={"task_id": "t/1"})
        runner.start()
        try:
            assert wait_until(lambda: "t/1" in tools.steps_in_flight(["t/1"]), 20)
            view = task_view(tools, "t/1")
            assert view is not None
            assert view.in_flight is not None
            assert (view.in_flight.seq, view.in_flight.name) == (2, "analyze")
            assert view.in_flight.started_at >= before - timedelta(seconds=1)
            (running,) = tools.running_checkpoints()
            assert running.in_flight == view.in_flight
            assert running.last_step == "fetch"
            # A watcher whose clock is an hour on sees the task stalled in analyze.
            later = FakeClock(datetime.now(UTC) + timedelta(hours=1))
            with WebhookServer() as hook, Cairn(store_url, clock=later) as watching:
                watcher = StallWatcher(watching, [WebhookNotifier(hook.url)], stall_after=60)
                assert watcher.check().raised == ["t/1"]
                (post,) = hook.delivered
            sent = post.json()
            assert "in step analyze (#2) for 1 hour" in sent["text"], sent["text"]
            assert sent["step_in_flight"] == "analyze"
            assert sent["in_flight_seconds"] >= 3599
        finally:
            release.set()
            runner.join(30)
        assert tools.steps_in_flight(["t/1"]) == {}
        view = task_view(tools, "t/1")
        assert view is not None
        assert view.task.status == "completed"
        assert view.in_flight is None


def test_a_note_is_fenced_and_a_new_claim_clears_it(store_url: str) -> None:
    """A note from an owner whose fence has moved on changes nothing, and a new
    claim (another attempt) starts with no step in flight: the last owner's step
    is not this attempt's."""
    now = datetime.now(UTC)
    with Cairn(store_url) as app:
        store = app.store
        store.create_task(NewTask("t/2", "crawl", "{}", "json", batch=None), now)
        lease = now + timedelta(days=1)
        first = store.claim_task("t/2", 0, "a/1/0/n", lease, now)
        assert first is not None
        store.note_in_flight([InFlightNote("t/2", first.fence, 1, "fetch", now)])
        tools = admin(store)
        assert tools.steps_in_flight(["t/2"])["t/2"].name == "fetch"
        second = store.claim_task("t/2", first.fence, "b/2/0/n", lease, now, owner_gone=True)
        assert second is not None
        assert tools.steps_in_flight(["t/2"]) == {}
        store.note_in_flight([InFlightNote("t/2", first.fence, 3, "stale", now)])
        assert tools.steps_in_flight(["t/2"]) == {}
        store.note_in_flight([InFlightNote("t/2", second.fence, 1, "fetch", now)])
        assert tools.steps_in_flight(["t/2"])["t/2"].seq == 1


def test_a_stall_alert_names_a_hashed_task_by_its_key_as_given(store_url: str) -> None:
    """A task whose arguments cairn hashed into its id (a slash and a space) is
    named in the stall alert by its arguments as given, its id after them."""
    created = datetime.now(UTC) - timedelta(hours=2)
    task_id = "reviews/sha256:0123456789abcdef"
    args = '{"app": "shop/a b"}'
    with Cairn(store_url) as app:
        new = NewTask(
            task_id, "review", args, "json", "reviews", item_key="sha256:0123456789abcdef"
        )
        app.store.create_task(new, created)
        claimed = app.store.claim_task(task_id, 0, "w/1/0/n", created + timedelta(days=1), created)
        assert claimed is not None
        with WebhookServer() as hook:
            watcher = StallWatcher(app, [WebhookNotifier(hook.url)], stall_after=60)
            assert watcher.check().raised == [task_id]
            (post,) = hook.delivered
    assert f"task app=shop/a b ({task_id}) of batch reviews" in post.json()["text"]
