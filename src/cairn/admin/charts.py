"""The metrics page's figures over time: tasks finished, and failed, per hour,
and what the model calls finished in each hour cost (as ``cairn cost`` prices
them: the cost recorded with each call).

Counting the whole store on every view is what made the page slow at 100,000
tasks. Instead, each closed hour (ended more than ``CLOSE_AFTER`` ago, so a
finish written late by a slow clock still lands in it) is summed once, by the
first reader that needs it, and kept (``metric_hours``, schema 9); a view then
reads the kept hours and sums only the hours still open, through the index on
``finished_at`` (and the partial index of the model calls' finishes). A figure
is of what was recorded when its hour was summed: a task retried later leaves
it as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from cairn.agent.costs import line_of
from cairn.store import AdminStore

__all__ = ["CLOSE_AFTER", "HOURS", "HourCount", "hourly"]

HOURS = 48
CLOSE_AFTER = timedelta(minutes=10)
_HOUR = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class HourCount:
    """Tasks finished in the hour starting ``hour`` (UTC), and of them failed;
    what the model calls finished in it cost (dollars)."""

    hour: datetime
    finished: int
    failed: int
    cost: float = 0.0


def _floor(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def _sums(
    store: AdminStore, start: datetime, end: datetime
) -> dict[datetime, tuple[int, int, float]]:
    """Per hour of ``[start, end)``: tasks finished, of them failed, calls' cost."""
    sums: dict[datetime, tuple[int, int, float]] = {}
    for at, status in store.finishes_between(start, end):
        done, failed, cost = sums.get(_floor(at), (0, 0, 0.0))
        sums[_floor(at)] = (done + 1, failed + (status == "failed"), cost)
    for at, call in store.calls_finished_between(start, end):
        done, failed, cost = sums.get(_floor(at), (0, 0, 0.0))
        sums[_floor(at)] = (done, failed, cost + line_of(call, None).cost)
    return sums


def hourly(store: AdminStore, now: datetime, hours: int = HOURS) -> list[HourCount]:
    """The last ``hours`` hours up to ``now``, oldest first."""
    start = _floor(now) - _HOUR * (hours - 1)
    every = [start + _HOUR * i for i in range(hours)]
    kept = {hour: (done, failed, cost) for hour, done, failed, cost in store.metric_hours(start)}
    closed = _floor(now - CLOSE_AFTER)  # the hours before this one are closed
    missing = [hour for hour in every if hour < closed and hour not in kept]
    if missing:
        found = _sums(store, missing[0], closed)
        summed = [(hour, *found.get(hour, (0, 0, 0.0))) for hour in missing]
        store.save_metric_hours(summed)
        kept.update({hour: (done, failed, cost) for hour, done, failed, cost in summed})
    still_open = _sums(store, closed, now + _HOUR)
    return [
        HourCount(hour, *(kept.get(hour) or still_open.get(hour, (0, 0, 0.0)))) for hour in every
    ]
