"""The dashboard's pure helpers: the gantt chart's geometry, durations and sizes
for people, and how a live region is marked with a digest of what it shows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cairn.admin.views import StepView
from cairn.ui.gantt import CHART_WIDTH, LABEL_WIDTH, MAX_ROWS, MIN_BAR, gantt
from cairn.ui.render import Page, counted, live_region, plural, seconds, size

START = datetime(2026, 5, 24, tzinfo=UTC)


def _step(seq: int, start: float, took: float, status: str = "completed") -> StepView:
    begun = START + timedelta(seconds=start)
    return StepView(
        seq, "step", f"s{seq}", status, 1, begun, begun + timedelta(seconds=took), None, None
    )


def test_bars_share_one_time_axis() -> None:
    """Each bar starts where its step started and is as long as it took, on an
    axis from the first start to the last finish."""
    chart = gantt([_step(1, 0, 2), _step(2, 2, 6), _step(3, 8, 0)])
    assert chart is not None
    first, second, third = chart.bars
    assert chart.span_seconds == 8
    assert (first.x, first.width) == (LABEL_WIDTH, CHART_WIDTH / 4)
    assert (second.x, second.width) == (LABEL_WIDTH + CHART_WIDTH / 4, CHART_WIDTH * 3 / 4)
    assert third.width == MIN_BAR  # no measurable time: still visible
    assert third.x <= LABEL_WIDTH + CHART_WIDTH - MIN_BAR
    assert [b.y for b in chart.bars] == [0, chart.row_height, 2 * chart.row_height]
    assert [label for _, label in chart.ticks] == ["0 ms", "2.0 s", "4.0 s", "6.0 s", "8.0 s"]


def test_no_steps_no_chart_and_long_histories_are_cut() -> None:
    """No steps: no chart. More than MAX_ROWS: the first ones, and how many more."""
    assert gantt([]) is None
    chart = gantt([_step(n, n, 1) for n in range(MAX_ROWS + 5)])
    assert chart is not None
    assert (len(chart.bars), chart.hidden) == (MAX_ROWS, 5)


def test_durations_and_sizes_read_as_people_write_them() -> None:
    """850 ms, 12.3 s, minutes and hours; bytes, KiB, MiB."""
    assert [seconds(v) for v in (None, 0.85, 12.34, 250, 7500)] == [
        "-",
        "850 ms",
        "12.3 s",
        "4 min 10 s",
        "2 h 5 min",
    ]
    assert [size(n) for n in (812, 4300, 1_572_864)] == ["812 B", "4.2 KiB", "1.5 MiB"]


def test_a_live_region_carries_the_digest_of_its_content() -> None:
    """The same content gives the same digest (so an unchanged poll is a 204);
    other content another one; values are escaped."""
    page = Page("t", "message.html", {"text": "<b>hi</b>", "back": "/"}, live=True)
    region, seen = live_region(page, "/x?a=1", 2.0)
    again, seen_again = live_region(page, "/x?a=1", 2.0)
    assert (region, seen) == (again, seen_again)
    assert f'data-seen="{seen}"' in region
    assert 'hx-trigger="every 2s"' in region
    assert "&lt;b&gt;hi&lt;/b&gt;" in region
    other = Page("t", "message.html", {"text": "bye", "back": "/"}, live=True)
    assert live_region(other, "/x?a=1", 2.0)[1] != seen


def test_counts_read_as_english_plurals() -> None:
    """1 batch, 3 batches (not "batchs"), 2 tasks, 0 tasks; nouns ending in s, x,
    ch, sh take -es, a consonant then y takes -ies, a vowel then y takes -s."""
    assert [counted(n, "batch") for n in (0, 1, 3)] == ["0 batches", "1 batch", "3 batches"]
    assert [counted(n, "task") for n in (1, 2)] == ["1 task", "2 tasks"]
    assert counted(2, "running task") == "2 running tasks"
    words = ("status", "box", "search", "flash", "entry", "key", "operation")
    assert [plural(word) for word in words] == [
        "statuses",
        "boxes",
        "searches",
        "flashes",
        "entries",
        "keys",
        "operations",
    ]
