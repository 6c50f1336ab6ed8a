"""Stall alerts: one post per stall, even across watcher restarts; one recovery
post when the task moves again or finishes; a webhook that is down is retried.

The tests on every backend are in ``store/test_watch.py``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
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


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """The CLI sets up the root logger (cairn.observe.logs); put it back after."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_cli_watch_once(app: Cairn, clock: FakeClock, restored_logging: None) -> None:
    """`cairn watch --once` says what it watches, checks once with the real clock
    and posts to --slack; httpx's request lines stay out of its log."""
    start_running(app, clock, "crawl/5")  # created at the fake clock's time, long ago
    with WebhookServer() as chat:
        args = ["watch", "--store", app.store.url, "--once", "--slack", chat.url]
        result = CliRunner().invoke(cli_app, args)
        assert result.exit_code == 0, result.output
        assert "1 stalled, 1 alerted" in result.stdout
        assert len(chat.delivered) == 1
    assert "cairn watch: running tasks of sqlite:///" in result.stderr
    assert "no checkpoint for 15 minutes is stalled; checking once; alerts to log, slack0" in (
        result.stderr
    )
    assert "HTTP Request" not in result.stderr
    first = result.stderr.splitlines()[0]
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ INFO cairn.observe: ", first), first


def test_cli_watch_json_logs(app: Cairn, clock: FakeClock, restored_logging: None) -> None:
    """`--log-format json`: every stderr line is a JSON object with ts, level,
    logger and message; a bad format is refused with the choices."""
    start_running(app, clock, "crawl/6")
    args = ["watch", "--store", app.store.url, "--once", "--log-format", "json"]
    result = CliRunner().invoke(cli_app, args)
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stderr.splitlines()]
    assert {"ts", "level", "logger", "message"} <= set(records[0])
    assert records[0]["ts"].endswith("Z")
    assert any("crawl/6" in r["message"] and r["level"] == "warning" for r in records)
    bad = CliRunner().invoke(cli_app, [*args[:-1], "yaml"])
    assert bad.exit_code != 0
    assert "choose text or json" in bad.output


WORKER_APP = """
from cairn import Cairn, Context

app = Cairn()


@app.task
def tidy(ctx: Context, n: int) -> int:
    return ctx.step("tidy", lambda: n)
"""


def test_worker_with_watch_alerts_a_stall_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restored_logging: None
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
