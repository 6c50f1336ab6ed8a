"""The daily report: what ran in a window, and posting it once per day.

``compose`` turns the metrics of a window into text. ``post_daily`` posts the
report of one UTC day through notifiers, inside a cairn task with id
``daily-report/{day}``: the text is recorded as a step the first time, and each
notifier posts under ``op_key("daily-report", day, notifier)``, so running it
again (a cron job fired twice, a rerun after a crash) never posts twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from typing import TYPE_CHECKING

from cairn.context import Context
from cairn.keys import op_key
from cairn.observe._time import day_bounds
from cairn.observe.metrics import Metrics, compute
from cairn.observe.notifiers import Message, Notifier
from cairn.observe.text import metrics_lines
from cairn.store.admin import admin
from cairn.store.protocol import Store
from cairn.store.reports import Window

if TYPE_CHECKING:
    from cairn.app import Cairn

REPORT_TASK = "cairn.observe.report"


def _span(since: datetime | None, until: datetime | None) -> str:
    start = "the beginning" if since is None else since.isoformat()
    end = "now" if until is None else until.isoformat()
    return f"{start} to {end}"


def compose(metrics: Metrics, title: str) -> str:
    """The report as chat-ready text."""
    counts = metrics.tasks_by_status
    done, failed = counts.get("completed", 0), counts.get("failed", 0)
    head = (
        f"{title}: {len(metrics.batches)} batch(es), {sum(counts.values())} task(s), "
        f"{done} completed, {failed} failed ({_span(metrics.since, metrics.until)}, "
        "tasks by creation time)"
    )
    return "\n".join([head, *(f"- {line}" for line in metrics_lines(metrics))])


def report_for(store: Store, since: datetime | None, until: datetime | None) -> str:
    """The report of tasks created in ``[since, until)``."""
    return compose(compute(store, Window(since=since, until=until)), "cairn report")


def day_report(store: Store, day: date) -> str:
    since, until = day_bounds(day)
    return compose(compute(store, Window(since=since, until=until)), f"cairn daily report {day}")


class DailyReporter:
    """Posts a day's report through ``notifiers`` at most once per day and notifier."""

    def __init__(self, app: Cairn, notifiers: Sequence[Notifier]) -> None:
        self.app = app
        self.notifiers = list(notifiers)
        self._task = app.task(name=REPORT_TASK)(self._post)

    def _post(self, ctx: Context, day: str) -> str:
        text: str = ctx.step("compose", day_report, self.app.store, date.fromisoformat(day))
        part = ctx.task_id.removeprefix(f"daily-report/{day}").strip("/")
        title = f"cairn daily report {day}" + (" (so far)" if part else "")
        message = Message("report", text, {"day": day, "partial": bool(part)}, title)
        for notifier in self.notifiers:
            key = op_key("daily-report", day, part, notifier.name) if part else None
            notifier.send(ctx, key or op_key("daily-report", day, notifier.name), message)
        return text

    def post(self, day: date, *, partial: bool = False) -> str:
        """The day's report, posted now unless it was posted before.

        A day that is not over yet is refused (its report would be posted once
        and never again) unless ``partial``: then it is posted under a key of
        its own, naming the minute, and the whole day can still be posted later."""
        now = self.app.clock.now()
        if day_bounds(day)[1] > now and not partial:
            raise ValueError(
                f"{day} is not over yet (UTC): its report would be incomplete and the day "
                "locked; post a finished day, or pass --partial to post what is there so far"
            )
        task_id = f"daily-report/{day.isoformat()}"
        if day_bounds(day)[1] > now:
            task_id += f"/partial-{now.strftime('%H%M')}"
        record = self.app.store.get_task(task_id)
        if record is not None and record.status == "failed":
            admin(self.app.store, "the daily report").retry_task(
                task_id, self.app.clock.now()
            )  # try the post again
        result: str = self.app.run(self._task, task_id=task_id, day=day.isoformat())
        return result
