"""``cairn.webhook.post_once`` against a real webhook server on 127.0.0.1.

The daily-report case: a report is posted once per key however often the
pipeline runs, transient webhook errors are retried with the same key, a
rejected message fails at once, and the webhook URL (a secret) is never written
to the store. The secret check reads the SQLite file's raw bytes, so it is SQLite's alone; the
posting tests run on every backend, in ``store/test_webhook.py``.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from cairn import Cairn, Context, TaskDef, TaskFailed, op_key
from cairn.clock import FakeClock
from cairn.store import admin
from cairn.webhook import post_once
from tests.integration.store.test_webhook import report_task
from tests.integration.store.test_webhook import (
    webhook as webhook,  # a fixture: pytest finds it by this name
)
from tests.servers import WebhookServer


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
