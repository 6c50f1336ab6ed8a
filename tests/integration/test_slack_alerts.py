"""Alerts as Slack and a generic webhook receive them: escaped text and valid
Block Kit blocks (a receiver that refuses what Slack refuses), and the generic
webhook's documented fields. Internal alert tasks never count in the metrics."""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from cairn import Cairn
from cairn.clock import FakeClock
from cairn.observe.metrics import compute
from cairn.observe.notifiers import SlackNotifier, WebhookNotifier
from cairn.observe.slack import payload
from cairn.observe.stalls import StallWatcher
from tests.integration.store.test_watch import STALL_AFTER, checkpoint, start_running
from tests.servers import Post, WebhookServer

NASTY = "crawl/<!channel> & <@U0123|boss>"
BLOCK_TYPES = {"header", "section", "context", "divider"}


def block_problems(body: dict[str, Any]) -> list[str]:
    """What Slack's incoming webhook would refuse in ``body`` (its documented limits)."""
    problems = []
    if not isinstance(body.get("text"), str) or not body["text"]:
        problems.append("no text fallback")
    blocks = body.get("blocks", [])
    if len(blocks) > 50:
        problems.append("more than 50 blocks")
    for block in blocks:
        kind = block.get("type")
        if kind not in BLOCK_TYPES:
            problems.append(f"unknown block type {kind!r}")
        elif kind == "header":
            text = block["text"]
            if text["type"] != "plain_text" or not 0 < len(text["text"]) <= 150:
                problems.append("header must be plain_text of 1-150 characters")
        elif kind == "section":
            text = block["text"]
            if text["type"] not in ("mrkdwn", "plain_text") or not 0 < len(text["text"]) <= 3000:
                problems.append("section text must be 1-3000 characters")
        elif kind == "context" and not 0 < len(block["elements"]) <= 10:
            problems.append("context takes 1-10 elements")
    return problems


class SlackServer(WebhookServer):
    """A Slack-shaped incoming webhook: answers 400 ``invalid_blocks`` to a body
    Slack would refuse, ``ok`` otherwise."""

    def answer(self, request: Any, method: str) -> None:
        body = request.read_body()
        problems = block_problems(json.loads(body))
        status = HTTPStatus.BAD_REQUEST if problems else HTTPStatus.OK
        with self._lock:
            self._posts.append(Post(request.path, {}, body, status))
        request.send_json(status, {"ok": not problems, "problems": problems})


def unescaped(text: str) -> str:
    """Markup Slack would act on: a ``<`` or ``>`` not written as an entity."""
    return "".join(c for c in text if c in "<>")


def test_slack_gets_escaped_text_and_valid_blocks(app: Cairn, clock: FakeClock) -> None:
    """A task id holding ``<!channel>`` reaches Slack escaped in the text and in
    every block; the blocks pass Slack's checks; the dashboard link is there."""
    start_running(app, clock, NASTY)
    clock.advance(STALL_AFTER + 61)
    with SlackServer() as chat:
        watcher = StallWatcher(
            app, [SlackNotifier(chat.url)], stall_after=STALL_AFTER, dashboard="http://dash:8484/"
        )
        assert watcher.check().raised == [NASTY]
        [post] = chat.posts
    assert post.status == HTTPStatus.OK
    body = post.json()
    assert "&lt;!channel&gt; &amp; &lt;@U0123|boss&gt;" in body["text"]
    assert unescaped(body["text"]) == ""
    sections = [b["text"]["text"] for b in body["blocks"] if b["type"] == "section"]
    assert all(unescaped(text) == "" for text in sections)
    assert "no progress for 16 minutes" in sections[0]
    assert "threshold 15 minutes" in sections[0]
    [link] = [b for b in body["blocks"] if b["type"] == "context"]
    assert link["elements"][0]["text"].startswith("<http://dash:8484/task?id=crawl%2F%3C%21channel")


def test_a_long_report_fits_one_slack_message() -> None:
    """A report far longer than a section is cut at line ends into sections and
    blocks Slack accepts, and long lines are cut too."""
    text = "\n".join(f"- step fetch-{n}: n=3 p50 1.00s <x>" for n in range(4000))
    body = payload("cairn daily report 2026-05-24", text + "\n" + "y" * 7000)
    assert block_problems(body) == []
    assert unescaped(body["text"]) == ""


def test_generic_webhook_fields(app: Cairn, clock: FakeClock) -> None:
    """The generic webhook gets the documented fields of a stall, then of its
    recovery (moving again), then of a finish."""
    task = start_running(app, clock, "crawl/7")
    checkpoint(app, clock, task, 0)
    clock.advance(STALL_AFTER + 5)
    with WebhookServer() as hook:
        watcher = StallWatcher(
            app, [WebhookNotifier(hook.url)], stall_after=STALL_AFTER, dashboard="http://d"
        )
        watcher.check()
        checkpoint(app, clock, task, 1)
        watcher.check()
        stall, moving = (post.json() for post in hook.delivered)
    assert stall["kind"] == "stall"
    assert stall["task_id"] == "crawl/7"
    assert stall["step"] == "s0"
    assert stall["batch"] is None
    assert stall["stalled_for_seconds"] == STALL_AFTER + 5
    assert stall["stall_after_seconds"] == STALL_AFTER
    assert stall["owner"] == "busy-host/7/0/n"
    assert stall["dashboard_url"] == "http://d/task?id=crawl%2F7"
    assert stall["checkpoint"].startswith("2026-05-24T")
    assert moving["kind"] == "recovered"
    assert moving["finished"] is False
    assert moving["status"] == "running"
    assert "is moving again" in moving["text"]


def test_recovery_says_finished(app: Cairn, clock: FakeClock) -> None:
    """A stalled task that then finishes is announced as finished, with its status."""
    task = start_running(app, clock, "crawl/8")
    clock.advance(STALL_AFTER + 5)
    with WebhookServer() as hook:
        watcher = StallWatcher(app, [WebhookNotifier(hook.url)], stall_after=STALL_AFTER)
        watcher.check()
        assert app.store.finish_task(task.id, task.fence, "completed", "1", None, clock.now())
        watcher.check()
        recovered = hook.delivered[1].json()
    assert recovered["finished"] is True
    assert recovered["status"] == "completed"
    assert "finished (completed)" in recovered["text"]


def test_alert_retries_are_not_redundant_execution(app: Cairn, clock: FakeClock) -> None:
    """A webhook that answered 500 twice makes the alert's operation take three
    calls; that is cairn's own task, so the redundant-execution rate stays empty."""
    start_running(app, clock, "crawl/9")
    clock.advance(STALL_AFTER + 5)
    with WebhookServer() as hook:
        hook.fail_next(2)
        StallWatcher(app, [WebhookNotifier(hook.url)], stall_after=STALL_AFTER).check()
        assert len(hook.posts) == 3
    redundancy = compute(app.store).redundancy
    assert redundancy.operation_keys == 0
    assert redundancy.redundant_execution_rate is None
