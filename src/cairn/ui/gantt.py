"""The geometry of a task's step timeline (an SVG gantt chart), as plain numbers.

One row per history entry, each bar from the step's start to its finish on a
shared time axis (the first start to the last finish). The template draws it
with SVG attributes only, no inline style, so the CSP's ``style-src 'self'``
holds. A step that took no measurable time still gets a visible sliver.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cairn.admin.views import StepView
from cairn.ui.render import seconds

LABEL_WIDTH = 220.0
CHART_WIDTH = 760.0
ROW_HEIGHT = 20.0
MIN_BAR = 2.0
# More steps than this: the chart shows the first ones and says how many more.
MAX_ROWS = 200


@dataclass(frozen=True, slots=True)
class Bar:
    seq: int
    label: str
    status: str
    x: float
    y: float
    width: float
    seconds: float


@dataclass(frozen=True, slots=True)
class Gantt:
    bars: list[Bar]
    width: float
    height: float
    span_seconds: float
    hidden: int
    ticks: list[tuple[float, str]]

    @property
    def label_width(self) -> float:
        return LABEL_WIDTH

    @property
    def row_height(self) -> float:
        return ROW_HEIGHT


def _ticks(span: float) -> list[tuple[float, str]]:
    """Five evenly spaced axis marks: (x, label in seconds)."""
    return [(LABEL_WIDTH + CHART_WIDTH * i / 4, seconds(span * i / 4)) for i in range(5)]


def gantt(steps: Sequence[StepView]) -> Gantt | None:
    """The chart of ``steps``, or None when there are none."""
    if not steps:
        return None
    shown = list(steps[:MAX_ROWS])
    start = min(step.started_at for step in shown)
    end = max(max(step.finished_at, step.started_at) for step in shown)
    span = max((end - start).total_seconds(), 1e-3)
    bars = []
    for row, step in enumerate(shown):
        offset = (step.started_at - start).total_seconds()
        took = max((step.finished_at - step.started_at).total_seconds(), 0.0)
        width = max(CHART_WIDTH * took / span, MIN_BAR)
        x = LABEL_WIDTH + min(CHART_WIDTH * offset / span, CHART_WIDTH - MIN_BAR)
        label = f"{step.seq} {step.kind} {step.name}"
        bars.append(Bar(step.seq, label[:34], step.status, x, row * ROW_HEIGHT, width, took))
    height = ROW_HEIGHT * len(bars) + 24
    return Gantt(
        bars, LABEL_WIDTH + CHART_WIDTH + 10, height, span, len(steps) - len(shown), _ticks(span)
    )
