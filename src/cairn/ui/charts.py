"""The geometry of the metrics page's bar charts over time, as plain numbers.

One bar per hour, as tall as its figure (tasks finished; or what the model
calls cost), a part of it drawn over it in red (the failed tasks); drawn by
the template with SVG attributes only (the CSP's ``style-src 'self'`` holds),
no outside asset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from cairn.admin.charts import HourCount

WIDTH = 760.0
HEIGHT = 120.0
AXIS = 16.0
LEFT = 44.0
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
    top: str
    ticks: list[tuple[float, str]]


def _chart(values: Sequence[tuple[datetime, float, float, str]], top_label: str) -> BarChart:
    """Bars of (hour, whole, red part, tooltip), scaled to the largest whole."""
    top = max([whole for _, whole, _, _ in values] + [0.0]) or 1.0
    step = (WIDTH - LEFT - RIGHT) / max(len(values), 1)
    room = HEIGHT - AXIS
    bars, ticks = [], []
    for i, (hour, whole, part, label) in enumerate(values):
        x = LEFT + i * step
        high, red = room * whole / top, room * part / top
        bars.append(HourBar(x, max(step - 1, 1), room - high, high, room - red, red, label))
        if hour.hour % 6 == 0:
            ticks.append((x, f"{hour:%H:00}"))
    return BarChart(bars, WIDTH, HEIGHT, top_label, ticks)


def bar_chart(counts: Sequence[HourCount]) -> BarChart:
    """Tasks finished per hour, the failed ones in red."""
    top = max([c.finished for c in counts] + [0])
    values = [
        (c.hour, float(c.finished), float(c.failed),
         f"{c.hour:%Y-%m-%d %H:00}: {c.finished} finished, {c.failed} failed")
        for c in counts
    ]  # fmt: skip
    return _chart(values, str(top))


def cost_chart(counts: Sequence[HourCount]) -> BarChart:
    """What the model calls finished in each hour cost."""
    top = max([c.cost for c in counts] + [0.0])
    values = [(c.hour, c.cost, 0.0, f"{c.hour:%Y-%m-%d %H:00}: ${c.cost:.4f}") for c in counts]
    return _chart(values, f"${top:.2f}")
