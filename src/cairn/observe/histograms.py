"""Step and model-call durations as cumulative histograms, read a little at a time.

The exporter keeps one ``StepHistograms`` for its life, counting from when it
started, as a Prometheus client library's histograms do: each scrape reads only
the rows finished since the latest one it saw (at first: since it started),
less ``OVERLAP``, so a row written by a worker whose clock is a little behind,
or committed a little late, is still seen; rows counted already are skipped. So
a scrape of a store with 100,000 finished tasks reads a few rows, and the
histograms only grow: counters, as ``rate()`` and ``histogram_quantile()``
expect, however many old tasks are pruned.

A row is grouped by its kind (``step`` or ``llm``) and its name's template
(``cairn.observe.templates``), so the series depend on the code, not on the
number of tasks or map items; past ``MAX_GROUPS`` groups the rest count as
step ``other``.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from cairn.observe.templates import step_template
from cairn.store.admin import AdminStore
from cairn.store.reports import Window

# Seconds: a cache hit to a long model call or a slow outside job.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
           300.0, 600.0, 1800.0, 3600.0)  # fmt: skip
OVERLAP = timedelta(minutes=5)
MAX_GROUPS = 200
OTHER = "other"

RowKey = tuple[str, int, int, datetime]


@dataclass
class Histogram:
    """Counts per bucket (not cumulative; the last is +Inf), the sum, and retries."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))
    total: float = 0.0
    retries: int = 0

    def add(self, seconds: float, attempts: int) -> None:
        self.counts[bisect.bisect_left(BUCKETS, seconds)] += 1
        self.total += seconds
        self.retries += max(attempts - 1, 0)

    def cumulative(self) -> list[tuple[str, float]]:
        """Prometheus buckets: (upper bound, observations at or below it)."""
        running, found = 0, []
        for bound, count in zip([*map(str, BUCKETS), "+Inf"], self.counts, strict=True):
            running += count
            found.append((bound, float(running)))
        return found


@dataclass
class StepHistograms:
    """The durations of the completed steps and model calls of ``window``,
    finished from ``since`` on (None: all of them)."""

    window: Window
    since: datetime | None = None
    groups: dict[tuple[str, str], Histogram] = field(default_factory=dict)
    _latest: datetime | None = None
    _seen: dict[RowKey, datetime] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def refresh(self, store: AdminStore) -> dict[tuple[str, str], Histogram]:
        """Count the rows finished since the last refresh; a copy of the groups."""
        with self._lock:
            latest = self._latest or self.since
            since = None if latest is None else latest - OVERLAP
            for task_id, seq, kind, name, attempts, began, ended in store.finished_steps(
                self.window, since
            ):
                key = (task_id, seq, attempts, ended)
                if key in self._seen:
                    continue
                self._seen[key] = ended
                self._group(kind, name).add(max((ended - began).total_seconds(), 0.0), attempts)
                if self._latest is None or ended > self._latest:
                    self._latest = ended
            self._forget()
            return dict(self.groups)

    def _group(self, kind: str, name: str) -> Histogram:
        key = (kind, step_template(name))
        if key not in self.groups and len(self.groups) >= MAX_GROUPS:
            key = (kind, OTHER)
        return self.groups.setdefault(key, Histogram())

    def _forget(self) -> None:
        """Drop the rows that the next read cannot return again."""
        if self._latest is None:
            return
        horizon = self._latest - OVERLAP
        self._seen = {key: ended for key, ended in self._seen.items() if ended >= horizon}
