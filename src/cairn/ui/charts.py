"""The geometry of the metrics page's bar chart over time, as plain numbers.

One bar per hour, as tall as the tasks finished in it, its failed part drawn
over it in red; drawn by the template with SVG attributes only (the CSP's
``style-src 'self'`` holds), no outside asset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cairn.admin.charts import HourCount

WIDTH = 760.0
HEIGHT = 120.0
AXIS = 16.0
LEFT = 36.0
# Room after the last bar for its axis label.
RIGHT = 24.0


@dataclass(frozen=True, slots=True)
class HourBar:
    x: float
    width: float
    finished_y: float
    finished_height: float
    failed_y: float
    failed_height: float
    label: str


@dataclass(frozen=True, slots=True)
class BarChart:
    bars: list[HourBar]
    width: float
    height: float
    top: int
    ticks: list[tuple[float, str]]
    finished: int
    failed: int


def bar_chart(counts: Sequence[HourCount]) -> BarChart:
    """The chart of ``counts`` (one bar per hour), scaled to the busiest hour."""
    top = max([c.finished for c in counts] + [1])
    step = (WIDTH - LEFT - RIGHT) / max(len(counts), 1)
    bars, ticks = [], []
    for i, count in enumerate(counts):
        x = LEFT + i * step
        done = (HEIGHT - AXIS) * count.finished / top
        failed = (HEIGHT - AXIS) * count.failed / top
        label = f"{count.hour:%Y-%m-%d %H:00}: {count.finished} finished, {count.failed} failed"
        bars.append(
            HourBar(
                x,
                max(step - 1, 1),
                HEIGHT - AXIS - done,
                done,
                HEIGHT - AXIS - failed,
                failed,
                label,
            )
        )
        if count.hour.hour % 6 == 0:
            ticks.append((x, f"{count.hour:%H:00}"))
    return BarChart(
        bars, WIDTH, HEIGHT, top, ticks, sum(c.finished for c in counts),
        sum(c.failed for c in counts),
    )  # fmt: skip
