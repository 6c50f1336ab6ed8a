"""``cairn.notify.post_once`` against a real webhook server on 127.0.0.1.

The daily-report case: a report is posted once per key however often the
pipeline runs, transient webhook errors are retried with the same key, a
rejected message fails at once, and the webhook URL (a secret) is never written
to the store. The posting tests run on SQLite and on PostgreSQL; the secret check
reads the SQLite file's raw bytes, so it is SQLite's alone.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn import Cairn, Context, TaskDef, TaskFailed, op_key
from cairn.clock import FakeClock
from cairn.notify import NOTIFY_RETRY, post_once
from cairn.store import admin
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


def store_bytes(db_path: Path) -> bytes:
    """The SQLite file with its WAL and shared-memory files, as raw bytes."""
    files = sorted(db_path.parent.glob(f"{db_path.name}*"))
    assert db_path in files
    return b"".join(path.read_bytes() for path in files)


def test_the_webhook_url_is_never_written_to_the_store(
    db_path: Path, clock: FakeClock, webhook: WebhookServer
) -> None:
    """The secret part of the webhook URL appears nowhere in the SQLite file,
    its WAL or its shm file, after a delivered post, a post retried after a 500,
    a post refused with 400, and posts to a URL nobody listens on (connection
    errors, retried until the task gives up)."""
    secret = uuid.uuid4().hex
    path = f"/services/T0CAIRN/B0CAIRN/{secret}"
    with WebhookServer() as gone:
        dead_url = f"{gone.url}{path}"  # this port is closed once the server stops
    app = Cairn(f"sqlite:///{db_path}", clock=clock)
    try:
        daily_report = report_task(app, f"{webhook.url}{path}")
        app.run(daily_report, day="2026-05-24")
        webhook.fail_next(1, status=500)
        app.run(daily_report, day="2026-05-25")
        webhook.fail_next(1, status=400)
        with pytest.raises(TaskFailed):
            app.run(daily_report, day="2026-05-26")
        with pytest.raises(TaskFailed) as unreachable:
            app.run(report_task_on(app, dead_url), day="2026-05-27")
        assert unreachable.value.error["type"] == "httpx.ConnectError"
        assert secret.encode() not in store_bytes(db_path)  # with the WAL not yet merged
        ops = list(admin(app.store).list_operations())
        assert {op.status for op in ops} == {"completed", "failed"}
        assert all(secret not in json.dumps(op.error or "") for op in ops)
    finally:
        app.close()
    assert [post.status for post in webhook.posts] == [200, 500, 200, 400]
    assert all(post.path == path for post in webhook.posts)
    assert secret.encode() not in store_bytes(db_path)


def report_task_on(app: Cairn, url: str) -> TaskDef[..., dict[str, Any]]:
    """A second report task (another name) posting to ``url``."""

    @app.task(name="daily_report_elsewhere")
    def daily_report_elsewhere(ctx: Context, day: str) -> dict[str, Any]:
        return post_once(ctx, op_key("daily-report", "elsewhere", day), url, f"report {day}")

    return daily_report_elsewhere
