"""Failure alerts from `cairn watch`: a task that fails for good, a batch that
ends with failures, and a digest when many fail at once, each posted exactly
once to a local webhook server across a restart of the watcher.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cairn import Cairn, Context
from cairn.cli import app as cli_app
from cairn.clock import FakeClock
from cairn.store import admin
from cairn.store.records import NewTask
from tests.servers import WebhookServer

BATCH = "nightly"


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """The CLI sets up the root logger (cairn.observe.logs); put it back after."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _run(url: str, items: list[str], *, batch: str = BATCH) -> None:
    """Run ``items`` as a batch (a fake clock from now on, so retries take no
    time): an item starting ``bad`` fails in analyze with a ValueError whose
    message holds chat markup; one starting ``slow`` fails in fetch."""
    clock = FakeClock(datetime.now(UTC))
    with Cairn(url, clock=clock) as app:

        @app.task(name="review")
        def review(ctx: Context, app_id: str) -> str:
            def fetch() -> str:
                if app_id.startswith("slow"):
                    raise TimeoutError(f"no answer for {app_id}")
                return app_id

            def analyze(text: str) -> str:
                if app_id.startswith("bad"):
                    raise ValueError(f"<!channel> no evidence for {app_id}\nsecond line")
                return text

            return str(ctx.step("analyze", analyze, ctx.step("fetch", fetch)))

        items_kw = [{"app_id": i} for i in items]
        app.run_batch(batch, review, items_kw, concurrency=4, progress=False)


def _one_left(url: str) -> None:
    """One more task of the batch, pending: the batch has not ended."""
    with Cairn(url) as app:
        app.store.create_task(
            NewTask(f"{BATCH}/last", "review", "{}", "json", BATCH), app.clock.now()
        )


def _watch(url: str, hook: str, *more: str) -> str:
    """One `cairn watch --once` (a watcher started afresh each time)."""
    args = ["watch", "--store", url, "--once", "--webhook", hook, *more]
    result = CliRunner().invoke(cli_app, args)
    assert result.exit_code == 0, result.output
    return result.stdout


def _kinds(posts: list[Any]) -> list[str]:
    return [post.json()["kind"] for post in posts]


def test_a_failed_batch_is_announced_once_across_restarts(
    tmp_path: Path, restored_logging: None
) -> None:
    """A batch that ended with one failure: one message, the batch's (its counts
    by status and by error type, the failed task's key and first line), however
    many watchers check after it; nothing more."""
    url = f"sqlite:///{tmp_path / 'cairn.db'}"
    _run(url, [f"ok{n}" for n in range(9)] + ["bad0"])
    with WebhookServer() as hook:
        assert "1 failure message(s)" in _watch(url, hook.url, "--dashboard", "http://dash:8484")
        for _ in range(2):
            assert "0 failure message(s)" in _watch(url, hook.url)
        (post,) = hook.delivered
    sent = post.json()
    assert sent["kind"] == "batch_failed"
    assert sent["counts"] == {"completed": 9, "failed": 1}
    assert sent["by_error_type"] == {"builtins.ValueError": 1}
    assert "app_id=bad0" in sent["text"]
    assert "<!channel> no evidence for bad0" in sent["text"]
    assert "second line" not in sent["text"]
    assert sent["dashboard_url"] == "http://dash:8484/tasks?batch=nightly&status=failed"


def test_a_hundred_failures_at_once_are_one_digest_then_one_batch_message(
    tmp_path: Path, restored_logging: None
) -> None:
    """100 tasks fail while the batch still has a task to run: one digest (100,
    by error type), nothing again after a restart; when the last task ends, one
    message for the batch, which names no failure twice."""
    url = f"sqlite:///{tmp_path / 'cairn.db'}"
    _run(url, [f"bad{n}" for n in range(70)] + [f"slow{n}" for n in range(30)])
    _one_left(url)
    with WebhookServer() as hook:
        assert "1 failure message(s)" in _watch(url, hook.url)
        assert "0 failure message(s)" in _watch(url, hook.url)
        assert _kinds(hook.delivered) == ["failures"]
        digest = hook.delivered[0].json()
        assert digest["count"] == 100
        assert digest["by_error_type"] == {"builtins.ValueError": 70, "builtins.TimeoutError": 30}
        assert len(digest["failures"]) == 100
        with Cairn(url) as app:  # the batch's last task is cancelled: it ends
            assert admin(app.store).cancel_task(f"{BATCH}/last", app.clock.now())
        assert "1 failure message(s)" in _watch(url, hook.url)
        assert "0 failure message(s)" in _watch(url, hook.url)
        assert _kinds(hook.delivered) == ["failures", "batch_failed"]
        ended = hook.delivered[1].json()
    assert ended["failures"] == []
    assert ended["by_error_type"] == {"builtins.ValueError": 70, "builtins.TimeoutError": 30}


def test_a_few_failures_are_one_message_each_with_step_error_and_link(
    tmp_path: Path, restored_logging: None
) -> None:
    """Two tasks fail while their batch goes on: one message each, naming the
    step it failed in, the error's type and first line, with a link to its page;
    a restart sends neither again."""
    url = f"sqlite:///{tmp_path / 'cairn.db'}"
    _run(url, ["ok1", "bad1", "slow1"])
    _one_left(url)
    with WebhookServer() as hook:
        assert "2 failure message(s)" in _watch(url, hook.url, "--dashboard", "http://dash")
        assert "0 failure message(s)" in _watch(url, hook.url, "--dashboard", "http://dash")
        sent = {post.json()["task_id"]: post.json() for post in hook.delivered}
    assert set(sent) == {f"{BATCH}/app_id=bad1", f"{BATCH}/app_id=slow1"}
    bad = sent[f"{BATCH}/app_id=bad1"]
    assert (bad["kind"], bad["step"], bad["error_type"]) == (
        "failed",
        "analyze",
        "builtins.ValueError",
    )
    assert bad["error"] == "<!channel> no evidence for bad1"
    assert "in step analyze" in bad["text"]
    assert bad["dashboard_url"] == "http://dash/task?id=nightly%2Fapp_id%3Dbad1"
    assert sent[f"{BATCH}/app_id=slow1"]["step"] == "fetch"


def test_slack_gets_the_failure_escaped(tmp_path: Path, restored_logging: None) -> None:
    """A failure posted to a chat webhook has the markup of its error escaped,
    so ``<!channel>`` in an error pings nobody."""
    url = f"sqlite:///{tmp_path / 'cairn.db'}"
    _run(url, ["ok1", "bad1"])
    with WebhookServer() as chat:
        args = ["watch", "--store", url, "--once", "--slack", chat.url]
        result = CliRunner().invoke(cli_app, args)
        assert result.exit_code == 0, result.output
        (post,) = chat.delivered
    text = post.json()["text"]
    assert "&lt;!channel&gt; no evidence for bad1" in text
    assert "<!channel>" not in text


def test_a_hashed_id_is_named_by_its_key_as_given(tmp_path: Path, restored_logging: None) -> None:
    """A task whose arguments cairn hashed into its id (a slash and a space)
    fails: its message names it by its arguments as given, its id after them;
    the ``task_id`` field stays the id."""
    url = f"sqlite:///{tmp_path / 'cairn.db'}"
    _run(url, ["bad x/y"])
    _one_left(url)
    with WebhookServer() as hook:
        assert "1 failure message(s)" in _watch(url, hook.url)
        (post,) = [post.json() for post in hook.delivered]
    assert post["task_id"].startswith(f"{BATCH}/sha256:")
    assert post["text"].startswith(f"cairn: task app_id=bad x/y ({post['task_id']}) ")
