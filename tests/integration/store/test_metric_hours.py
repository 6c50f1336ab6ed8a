"""The metrics page's chart over time: tasks finished and failed per hour, each
closed hour summed once and kept (schema 9), the open hours read through the
index on ``finished_at``; and the page itself, bounded: the chart, a page of
batches, the durability metrics only for a chosen batch or window.

Every test here runs on each backend (the conformance suite).
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from cairn import Cairn, Context
from cairn.admin.charts import hourly
from cairn.clock import FakeClock
from cairn.store import admin, sqlmetrics
from cairn.store.records import NewTask, StepRecord
from cairn.store.sqlbase import SQLStore
from cairn.ui.config import UIConfig
from cairn.ui.pages import metrics
from cairn.ui.render import content
from tests.integration.test_claim_plans import _sqlite_plan


def _finish_over_hours(app: Cairn, clock: FakeClock) -> None:
    """Three hours of work: 4 tasks (1 failed) and a model call that cost $0.25
    in the first, none in the second, 2 tasks in the third; the clock then
    stands 20 minutes into the third."""

    @app.task(name="work")
    def work(ctx: Context, n: int) -> int:
        if n == 3:
            raise ValueError("three")
        return n

    start = clock.now().replace(minute=5, second=0, microsecond=0)
    clock.advance((start - clock.now()).total_seconds())
    app.run_batch("first", work, [{"n": n} for n in range(4)], progress=False)
    _model_call(app, clock, 0.25)
    clock.advance(2 * 3600)
    app.run_batch("third", work, [{"n": n} for n in (10, 11)], progress=False)
    clock.advance(15 * 60)


def _model_call(app: Cairn, clock: FakeClock, cost: float) -> None:
    """A task of batch first whose one entry is a model call that cost ``cost``
    (as ``ctx.llm_call`` records it), finished now; the task completes."""
    now = clock.now()
    app.store.create_task(NewTask("first/agent", "work", "{}", "json", "first"), now)
    task = app.store.claim_task("first/agent", 0, "me/1/0/n", now + timedelta(hours=1), now)
    assert task is not None
    output = json.dumps({"usage": {"input_tokens": 10, "output_tokens": 5}, "cost": cost})
    call = StepRecord(task.id, 1, "llm", "ask", "completed", output, 1, 1, 1, None, None, now, now)
    assert app.store.record_step(call, task.fence)
    assert app.store.finish_task(task.id, task.fence, "completed", "null", None, now)


def test_closed_hours_are_summed_once_and_kept(any_app: Cairn, clock: FakeClock) -> None:
    """The chart counts each hour's finishes and failures; the closed hours are
    kept after the first look (a second look reads them), the open one is not;
    the chart counts again only the hour still open."""
    _finish_over_hours(any_app, clock)
    store = admin(any_app.store)
    now = clock.now()
    counts = hourly(store, now, hours=3)
    assert [(c.finished, c.failed, c.cost) for c in counts] == [
        (5, 1, 0.25), (0, 0, 0.0), (2, 0, 0.0),
    ]  # fmt: skip
    kept = store.metric_hours(now - timedelta(hours=3))
    assert [row[1:] for row in kept] == [(5, 1, 0.25), (0, 0, 0.0)]
    assert [(c.finished, c.failed, c.cost) for c in hourly(store, now, hours=3)] == [
        (5, 1, 0.25), (0, 0, 0.0), (2, 0, 0.0),
    ]  # fmt: skip


def test_the_page_is_bounded_unless_a_batch_is_chosen(any_app: Cairn, clock: FakeClock) -> None:
    """Without a choice the page draws the chart and lists the newest batches,
    with no durability metrics (a pass over the store); with a batch it shows
    that batch's."""
    _finish_over_hours(any_app, clock)
    config = UIConfig(admin(any_app.store), clock.now)
    page = content(metrics(config, {}))
    assert 'id="hourly"' in page
    assert 'id="hourly-cost"' in page
    # Two hours with finishes, one with a failure; one hour with a cost.
    assert page.count("<rect ") == 4
    assert "$0.2500 in all" in page
    assert 'id="choose"' in page
    assert 'id="metrics"' not in page
    assert page.index(">third<") < page.index(">first<")
    chosen = content(metrics(config, {"batch": "first"}))
    assert 'id="metrics"' in chosen
    assert 'id="choose"' not in chosen


def test_the_open_hours_are_read_through_the_finish_indexes(tmp_path: Path) -> None:
    """On SQLite the reads of an hour's finishes and model calls search
    ``tasks_by_finish`` and ``calls_by_finish``: no pass over the tasks or the
    steps, however many the store holds."""
    with Cairn(f"sqlite:///{tmp_path / 'plans.db'}") as app:
        store = app.store
        assert isinstance(store, SQLStore)
        moment = store._ts(app.clock.now())
        for statement, index in (
            (sqlmetrics.FINISHES_BETWEEN, "tasks_by_finish"),
            (sqlmetrics.CALLS_FINISHED_BETWEEN, "calls_by_finish"),
        ):
            plan = _sqlite_plan(store, statement, [moment, moment])
            assert any(f"INDEX {index}" in step for step in plan), plan
            assert not [step for step in plan if step.startswith(("SCAN t", "SCAN s"))], plan
