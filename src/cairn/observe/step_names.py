"""Step names grouped by their template, so a summary has one line per kind of
step, not one per numbered step or map item.

``fetch-3``, ``fetch_12``, ``fetch 7`` and ``fetch[41]`` are all ``fetch``
items: a trailing index (digits after ``-``, ``_``, ``.``, a space, or in
brackets) is dropped. ``page[i]``-style names are how ``ctx.map`` items and
hand-numbered steps are usually written; a name that is only digits is kept.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

__all__ = ["StepGroup", "name_template", "step_groups"]

_INDEXED = re.compile(r"^(?P<template>.*?\D)(?:\[\d+\]|[-_. ]?\d+)$")


def name_template(name: str) -> str:
    """``name`` without its trailing index: ``fetch-3`` and ``fetch[3]`` -> ``fetch``."""
    while True:
        match = _INDEXED.match(name)
        if match is None:
            return name
        shorter = match.group("template").rstrip("-_. ")
        if not shorter or shorter == name:
            return name
        name = shorter


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
        durations[name_template(name)].append((finished - started).total_seconds())
    groups = [
        StepGroup(name, len(values), max(values), statistics.median(values))
        for name, values in durations.items()
    ]
    return sorted(groups, key=lambda g: (-g.max_seconds, g.name))
