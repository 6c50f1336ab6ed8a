"""The metrics page's figures over time: tasks finished, and failed, per hour.

Counting the whole store on every view is what made the page slow at 100,000
tasks. Instead, each closed hour (ended more than ``CLOSE_AFTER`` ago, so a
finish written late by a slow clock still lands in it) is summed once, by the
first reader that needs it, and kept (``metric_hours``, schema 6); a view then
reads the kept hours and sums only the hours still open, through the index on
``finished_at``. A figure is of the finishes as recorded when its hour was
summed: a task retried later leaves it as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from cairn.store import AdminStore

__all__ = ["CLOSE_AFTER", "HOURS", "HourCount", "hourly"]

HOURS = 48
CLOSE_AFTER = timedelta(minutes=10)
_HOUR = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class HourCount:
    """Tasks finished in the hour starting ``hour`` (UTC), and of them failed."""

    hour: datetime
    finished: int
    failed: int


def _floor(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def _sums(finishes: list[tuple[datetime, str]]) -> dict[datetime, tuple[int, int]]:
    sums: dict[datetime, tuple[int, int]] = {}
    for at, status in finishes:
        hour = _floor(at)
        done, failed = sums.get(hour, (0, 0))
        sums[hour] = (done + 1, failed + (status == "failed"))
    return sums


def hourly(store: AdminStore, now: datetime, hours: int = HOURS) -> list[HourCount]:
    """The last ``hours`` hours up to ``now``, oldest first."""
    start = _floor(now) - _HOUR * (hours - 1)
    every = [start + _HOUR * i for i in range(hours)]
    kept = {hour: (done, failed) for hour, done, failed in store.metric_hours(start)}
    closed = _floor(now - CLOSE_AFTER)  # the hours before this one are closed
    missing = [hour for hour in every if hour < closed and hour not in kept]
    if missing:
        found = _sums(store.finishes_between(missing[0], closed))
        summed = [(hour, *found.get(hour, (0, 0))) for hour in missing]
        store.save_metric_hours(summed)
        kept.update({hour: (done, failed) for hour, done, failed in summed})
    still_open = _sums(store.finishes_between(closed, now + _HOUR))
    counts = []
    for hour in every:
        done, failed = kept.get(hour) or still_open.get(hour, (0, 0))
        counts.append(HourCount(hour, done, failed))
    return counts
