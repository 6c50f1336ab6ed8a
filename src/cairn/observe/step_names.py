"""Step names grouped by their template (``cairn.observe.templates``), so a
summary has one line per kind of step, not one per numbered step or map item.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from cairn.observe.templates import step_template

__all__ = ["StepGroup", "step_groups"]


@dataclass(frozen=True, slots=True)
class StepGroup:
    """The completed steps of one name template: how many, the longest and the
    median duration, in seconds."""

    name: str
    count: int
    max_seconds: float
    median_seconds: float


def step_groups(rows: Iterable[tuple[str, datetime, datetime]]) -> list[StepGroup]:
    """(name, started, finished) rows grouped by template, slowest first."""
    durations: dict[str, list[float]] = defaultdict(list)
    for name, started, finished in rows:
        durations[step_template(name)].append((finished - started).total_seconds())
    groups = [
        StepGroup(name, len(values), max(values), statistics.median(values))
        for name, values in durations.items()
    ]
    return sorted(groups, key=lambda g: (-g.max_seconds, g.name))
