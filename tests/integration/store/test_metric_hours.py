"""The metrics page's chart over time: tasks finished and failed per hour, each
closed hour summed once and kept (schema 6), the open hours read through the
index on ``finished_at``; and the page itself, bounded: the chart, a page of
batches, the durability metrics only for a chosen batch or window.

Every test here runs on each backend (the conformance suite).
"""

from __future__ import annotations

from datetime import timedelta

from cairn import Cairn, Context
from cairn.admin.charts import hourly
from cairn.clock import FakeClock
from cairn.store import admin
from cairn.ui.config import UIConfig
from cairn.ui.pages import metrics
from cairn.ui.render import content


def _finish_over_hours(app: Cairn, clock: FakeClock) -> None:
    """Three hours of work: 4 tasks (1 failed) in the first, none in the
    second, 2 in the third; the clock then stands 20 minutes into the third."""

    @app.task(name="work")
    def work(ctx: Context, n: int) -> int:
        if n == 3:
            raise ValueError("three")
        return n

    start = clock.now().replace(minute=5, second=0, microsecond=0)
    clock.advance((start - clock.now()).total_seconds())
    app.run_batch("first", work, [{"n": n} for n in range(4)], progress=False)
    clock.advance(2 * 3600)
    app.run_batch("third", work, [{"n": n} for n in (10, 11)], progress=False)
    clock.advance(15 * 60)


def test_closed_hours_are_summed_once_and_kept(any_app: Cairn, clock: FakeClock) -> None:
    """The chart counts each hour's finishes and failures; the closed hours are
    kept after the first look (a second look reads them), the open one is not;
    the chart counts again only the hour still open."""
    _finish_over_hours(any_app, clock)
    store = admin(any_app.store)
    now = clock.now()
    counts = hourly(store, now, hours=3)
    assert [(c.finished, c.failed) for c in counts] == [(4, 1), (0, 0), (2, 0)]
    kept = store.metric_hours(now - timedelta(hours=3))
    assert [(done, failed) for _, done, failed in kept] == [(4, 1), (0, 0)]
    assert [(c.finished, c.failed) for c in hourly(store, now, hours=3)] == [
        (4, 1), (0, 0), (2, 0),
    ]  # fmt: skip


def test_the_page_is_bounded_unless_a_batch_is_chosen(any_app: Cairn, clock: FakeClock) -> None:
    """Without a choice the page draws the chart and lists the newest batches,
    with no durability metrics (a pass over the store); with a batch it shows
    that batch's."""
    _finish_over_hours(any_app, clock)
    config = UIConfig(admin(any_app.store), clock.now)
    page = content(metrics(config, {}))
    assert 'id="hourly"' in page
    assert page.count("<rect ") == 3  # two hours with finishes, one with a failure
    assert 'id="choose"' in page
    assert 'id="metrics"' not in page
    assert page.index(">third<") < page.index(">first<")
    chosen = content(metrics(config, {"batch": "first"}))
    assert 'id="metrics"' in chosen
    assert 'id="choose"' not in chosen
