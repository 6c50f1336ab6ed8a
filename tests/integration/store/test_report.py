"""The daily report: its text counts the day's work, and posting it twice (a cron
job fired twice, a rerun) delivers it once.

Every test here runs on each backend (the conformance suite).
"""

from __future__ import annotations

from datetime import date

import pytest

from cairn import Cairn, Context
from cairn.clock import FakeClock
from cairn.observe.notifiers import SlackNotifier
from cairn.observe.report import DailyReporter, day_report
from tests.servers import WebhookServer

DAY = date(2026, 5, 24)  # the fake clock's first day


def run_day(app: Cairn) -> None:
    @app.task(name="check")
    def check(ctx: Context, n: int) -> int:
        if n == 2:
            raise ValueError("bad")
        return int(ctx.step("double", lambda: n * 2))

    app.run_batch(f"checks-{DAY}", check, [{"n": n} for n in range(4)], progress=False)


def test_report_counts_the_day(any_app: Cairn, clock: FakeClock) -> None:
    """The report of the day names the batch, 3 completed and 1 failed; the next
    day's report is empty."""
    run_day(any_app)
    text = day_report(any_app.store, DAY)
    assert "1 batch(es), 4 task(s), 3 completed, 1 failed" in text
    assert f"batch checks-{DAY}" in text
    assert "failed tasks by error: builtins.ValueError 1" in text
    assert "0 task(s)" in day_report(any_app.store, date(2026, 5, 25))


def test_posted_once_per_day(any_app: Cairn, clock: FakeClock) -> None:
    """Posting the same day's report again, and again from another app on the
    same store (a new process), posts nothing more; another day posts its own."""
    run_day(any_app)
    clock.advance(2 * 86400)  # both days are over
    with WebhookServer() as chat:
        reporter = DailyReporter(any_app, [SlackNotifier(chat.url)])
        reporter.post(DAY)
        reporter.post(DAY)
        other = Cairn(any_app.store.url, clock=clock)
        try:
            second = DailyReporter(other, [SlackNotifier(chat.url)])
            text = second.post(DAY)
            second.post(date(2026, 5, 25))
        finally:
            other.close()
        assert next(post.json()["text"] for post in chat.delivered) == text
        assert len(chat.delivered) == 2


def test_a_day_not_over_is_refused_unless_partial(any_app: Cairn, clock: FakeClock) -> None:
    """Today's report is refused (it would lock the day); --partial posts what is
    there under a key of its own, and the whole day is still posted once it is over."""
    run_day(any_app)
    with WebhookServer() as chat:
        reporter = DailyReporter(any_app, [SlackNotifier(chat.url)])
        with pytest.raises(ValueError, match="not over yet"):
            reporter.post(DAY)
        reporter.post(DAY, partial=True)
        clock.advance(86400)
        reporter.post(DAY)
        titles = [post.json()["blocks"][0]["text"]["text"] for post in chat.delivered]
    assert titles == [f"cairn daily report {DAY} (so far)", f"cairn daily report {DAY}"]
