"""``cairn.webhook.post_once`` against a real webhook server on 127.0.0.1.

The daily-report case: a report is posted once per key however often the
pipeline runs, transient webhook errors are retried with the same key, a
rejected message fails at once, and the webhook URL (a secret) is never written
to the store. The posting tests run on each backend; the secret check reads the SQLite file's
raw bytes, so it is SQLite's alone (``tests/integration/test_notify.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cairn import Cairn, Context, TaskDef, TaskFailed, op_key
from cairn.clock import FakeClock
from cairn.webhook import NOTIFY_RETRY, post_once
from tests.servers import WebhookServer

DAY = "2026-05-24"
KEY = op_key("daily-report", DAY)
TEXT = f"Revenue report for {DAY}: 1,234 USD"
SCOPE = "notify"


@pytest.fixture
def webhook() -> Iterator[WebhookServer]:
    """A chat webhook on a free local port that records every post."""
    with WebhookServer() as server:
        yield server


def report_task(app: Cairn, url: str) -> TaskDef[..., dict[str, Any]]:
    """A task posting the day's report; the URL is held here, not in its arguments."""

    @app.task(name="daily_report")
    def daily_report(ctx: Context, day: str) -> dict[str, Any]:
        return post_once(
            ctx, op_key("daily-report", day), url, f"Revenue report for {day}: 1,234 USD"
        )

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
