"""``cairn.webhook.post_once`` against a real webhook server on 127.0.0.1.

The daily-report case: a report is posted once per key however often the
pipeline runs, transient webhook errors are retried with the same key, a
rejected message fails at once, a post whose answer was lost is never sent
again on cairn's own, and the webhook URL (a secret) is never written
to the store. The posting tests run on each backend; the secret check reads the SQLite file's
raw bytes, so it is SQLite's alone (``tests/integration/test_notify.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cairn import Cairn, Context, TaskDef, TaskFailed, op_key
from cairn.clock import FakeClock
from cairn.engine.once import OnDoubt
from cairn.webhook import NOTIFY_RETRY, post_once
from tests.servers import Post, RequestHandler, WebhookServer

DAY = "2026-05-24"
KEY = op_key("daily-report", DAY)
TEXT = f"Revenue report for {DAY}: 1,234 USD"
SCOPE = "notify"


@pytest.fixture
def webhook() -> Iterator[WebhookServer]:
    """A chat webhook on a free local port that records every post."""
    with WebhookServer() as server:
        yield server


class AnswerLostWebhook(WebhookServer):
    """A chat webhook that posts each message to its channel (records it), then
    loses the connection before its answer for the first ``lose`` posts: the
    report is in the channel, and the sender never hears so."""

    def __init__(self, lose: int) -> None:
        super().__init__()
        self.lose = lose

    def answer(self, request: RequestHandler, method: str) -> None:
        with self._lock:
            losing = self.lose > 0
            self.lose -= losing
        if not losing:
            super().answer(request, method)
            return
        body = request.read_body()
        headers = {name.lower(): value for name, value in request.headers.items()}
        with self._lock:
            self._posts.append(Post(request.path, headers, body, 0))
        request.close_connection = True  # no status line: the client sees the connection drop


def report_task(app: Cairn, url: str, on_doubt: OnDoubt = "raise") -> TaskDef[..., dict[str, Any]]:
    """A task posting the day's report; the URL is held here, not in its arguments."""

    @app.task(name="daily_report")
    def daily_report(ctx: Context, day: str) -> dict[str, Any]:
        text = f"Revenue report for {day}: 1,234 USD"
        return post_once(ctx, op_key("daily-report", day), url, text, on_doubt=on_doubt)

    return daily_report


def test_one_post_per_key_across_reruns_and_tasks(any_app: Cairn, webhook: WebhookServer) -> None:
    """Running the report task twice, and then another task with the same key,
    posts once: the body is Slack-style ``{"text": ...}``, the operation key goes
    as the ``Idempotency-Key`` header, and every run returns the one recorded
    answer."""
    daily_report = report_task(any_app, f"{webhook.url}/hooks/daily")

    first = any_app.run(daily_report, day=DAY)
    again = any_app.run(daily_report, day=DAY)
    other_task = any_app.run(daily_report, task_id="pipeline-rerun", day=DAY)

    assert len(webhook.posts) == 1
    post = webhook.posts[0]
    assert post.path == "/hooks/daily"
    assert post.json() == {"text": TEXT}
    assert post.headers["idempotency-key"] == KEY
    assert first == again == other_task
    assert first["status"] == 200
    op = any_app.store.get_operation(SCOPE, KEY)
    assert op is not None
    assert (op.status, op.calls, op.task_id) == ("completed", 1, f"daily_report/day={DAY}")


def test_a_server_error_is_retried_with_the_same_key_until_delivered(
    any_app: Cairn, clock: FakeClock, webhook: WebhookServer
) -> None:
    """Two 500 answers are retried after the notify backoff (2 s, then 4 s, on
    the fake clock), with the same Idempotency-Key each time; the third post is
    delivered, and exactly one successful post is recorded, also after a rerun."""
    daily_report = report_task(any_app, f"{webhook.url}/hooks/daily")
    webhook.fail_next(2, status=500)

    result = any_app.run(daily_report, day=DAY)
    any_app.run(daily_report, day=DAY)

    assert [post.status for post in webhook.posts] == [500, 500, 200]
    assert len(webhook.delivered) == 1
    assert {post.headers["idempotency-key"] for post in webhook.posts} == {KEY}
    assert result["status"] == 200
    jitter = 1 + NOTIFY_RETRY.jitter
    assert len(clock.slept) == 2
    assert 2.0 <= clock.slept[0] <= 2.0 * jitter
    assert 4.0 <= clock.slept[1] <= 4.0 * jitter
    op = any_app.store.get_operation(SCOPE, KEY)
    assert op is not None
    assert (op.status, op.calls) == ("completed", 3)


def test_a_client_error_fails_at_once_and_for_good(any_app: Cairn, webhook: WebhookServer) -> None:
    """A 400 answer is not retried: the task fails with the Permanent error
    recorded, the key is ``failed`` and marked permanent, and neither a rerun of
    the task nor another task with the same key posts again."""
    daily_report = report_task(any_app, f"{webhook.url}/hooks/daily")
    webhook.fail_next(1, status=400)

    with pytest.raises(TaskFailed) as failed:
        any_app.run(daily_report, day=DAY)
    with pytest.raises(TaskFailed):
        any_app.run(daily_report, day=DAY)
    with pytest.raises(TaskFailed) as other:
        any_app.run(daily_report, task_id="pipeline-rerun", day=DAY)

    assert [post.status for post in webhook.posts] == [400]
    assert failed.value.error["type"] == "cairn.errors.Permanent"
    assert "400" in failed.value.error["message"]
    assert other.value.error["type"] == "cairn.errors.OperationFailed"
    task = any_app.store.get_task(f"daily_report/day={DAY}")
    assert task is not None
    assert (task.status, task.attempts) == ("failed", 1)
    op = any_app.store.get_operation(SCOPE, KEY)
    assert op is not None
    assert (op.status, op.permanent, op.calls) == ("failed", True, 1)


def test_a_post_whose_answer_was_lost_is_not_sent_again(any_app: Cairn) -> None:
    """The webhook receives the report (it is in the channel) and the connection
    drops before its answer. Most chat webhooks neither dedupe nor can be asked,
    so post_once must not post again on its own: the channel holds one report;
    the task fails at once with an error saying to look in the channel and
    settle the key, the key is failed for good, and a rerun posts nothing."""
    with AnswerLostWebhook(lose=1) as webhook:
        daily_report = report_task(any_app, f"{webhook.url}/hooks/daily")
        with pytest.raises(TaskFailed) as failed:
            any_app.run(daily_report, day=DAY)
        with pytest.raises(TaskFailed) as again:
            any_app.run(daily_report, task_id="pipeline-rerun", day=DAY)
        posts = webhook.posts
    assert len(posts) == 1
    assert failed.value.error["type"] == "cairn.errors.Permanent"
    assert "may have received" in failed.value.error["message"]
    assert f"cairn ops resolve {KEY} --scope notify" in failed.value.error["message"]
    assert again.value.error["type"] == "cairn.errors.OperationFailed"
    op = any_app.store.get_operation(SCOPE, KEY)
    assert op is not None
    assert (op.status, op.permanent, op.calls) == ("failed", True, 1)


def test_a_lost_answer_is_posted_again_where_the_receiver_dedupes(any_app: Cairn) -> None:
    """With on_doubt="retry" (a receiver that honours Idempotency-Key), a post
    whose answer was lost is sent again with the same key, and the second
    answer is recorded."""
    with AnswerLostWebhook(lose=1) as webhook:
        daily_report = report_task(any_app, f"{webhook.url}/hooks/daily", on_doubt="retry")
        result = any_app.run(daily_report, day=DAY)
        posts = webhook.posts
    assert [post.headers["idempotency-key"] for post in posts] == [KEY, KEY]
    assert result["status"] == 200
