"""Stall alerts: one post per stall, even across watcher restarts; one recovery
post when the task moves again or finishes; a webhook that is down is retried.

The tests on every backend are in ``store/test_watch.py``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cairn import Cairn
from cairn.cli import app as cli_app
from cairn.clock import FakeClock
from cairn.observe.notifiers import SlackNotifier, notifiers_for
from cairn.observe.stalls import StallWatcher, find_stalls
from tests.integration.store.test_watch import STALL_AFTER, start_running
from tests.servers import WebhookServer


def test_webhook_down_is_retried_without_duplicates(app: Cairn, clock: FakeClock) -> None:
    """While the webhook answers 500 the post is retried (same key) until it is
    delivered; it is delivered exactly once, and later checks post nothing."""
    start_running(app, clock, "crawl/3")
    clock.advance(STALL_AFTER + 1)
    with WebhookServer() as chat:
        chat.fail_next(3)
        watcher = StallWatcher(app, [SlackNotifier(chat.url)], stall_after=STALL_AFTER)
        assert watcher.check().raised == ["crawl/3"]
        for _ in range(2):
            assert watcher.check().raised == []
        assert len(chat.delivered) == 1
        assert len(chat.posts) == 4
        assert len({post.headers["idempotency-key"] for post in chat.posts}) == 1


def test_watchers_own_tasks_are_never_stalls(app: Cairn, clock: FakeClock) -> None:
    """Alert tasks are cairn's own: never reported as stalled or counted."""
    start_running(app, clock, "crawl/4")
    clock.advance(STALL_AFTER + 1)
    watcher = StallWatcher(app, notifiers_for(), stall_after=STALL_AFTER)
    watcher.check()
    clock.advance(10 * STALL_AFTER)
    assert [s.task.task_id for s in find_stalls(app, STALL_AFTER)] == ["crawl/4"]


def test_cli_watch_once(app: Cairn, clock: FakeClock) -> None:
    """`cairn watch --once` checks once with the real clock and posts to --slack."""
    start_running(app, clock, "crawl/5")  # created at the fake clock's time, long ago
    with WebhookServer() as chat:
        args = ["watch", "--store", app.store.url, "--once", "--slack", chat.url]
        result = CliRunner().invoke(cli_app, args)
        assert result.exit_code == 0, result.output
        assert "1 stalled, 1 alerted" in result.stdout
        assert len(chat.delivered) == 1


WORKER_APP = """
from cairn import Cairn, Context

app = Cairn()


@app.task
def tidy(ctx: Context, n: int) -> int:
    return ctx.step("tidy", lambda: n)
"""


def test_worker_with_watch_alerts_a_stall_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cairn worker --watch` runs the stall watcher beside the worker: a task of
    another app that has made no progress for an hour is alerted once, and a
    second worker started the same way does not alert it again."""
    store = f"sqlite:///{tmp_path / 'cairn.db'}"
    long_ago = FakeClock(datetime.now(UTC) - timedelta(hours=1))
    owner = Cairn(store, clock=long_ago)
    start_running(owner, long_ago, "crawl/9")
    owner.close()
    (tmp_path / "watched_worker_app.py").write_text(WORKER_APP)
    monkeypatch.chdir(tmp_path)
    with WebhookServer() as hook:
        for _ in range(2):
            result = CliRunner().invoke(
                cli_app,
                [
                    "worker",
                    "watched_worker_app:app",
                    "--burst",
                    "--watch",
                    "--stall-after",
                    "15m",
                    "--webhook",
                    hook.url,
                    "--store",
                    store,
                ],
            )
            assert result.exit_code == 0, result.output
        assert len(hook.delivered) == 1
        assert "crawl/9" in json.dumps(hook.delivered[0].json())
