"""The metrics summary the dashboard shows: ``cairn.observe.metrics`` (whose
steps are already grouped by name template: one line for ``fetch-1`` …
``fetch-900``) and the stalled tasks."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from cairn.observe.metrics import Metrics, compute
from cairn.observe.stalls import DEFAULT_STALL_AFTER, Stall, stalls_in
from cairn.store import AdminStore
from cairn.store.reports import Window

__all__ = ["MetricsSummary", "metrics_summary"]


@dataclass(frozen=True, slots=True)
class MetricsSummary:
    """The metrics of a window and the running tasks that have stalled."""

    metrics: Metrics
    stalls: list[Stall]


def metrics_summary(
    store: AdminStore,
    window: Window | None = None,
    *,
    now: datetime,
    stall_after: float = DEFAULT_STALL_AFTER,
) -> MetricsSummary:
    """The summary of ``window`` (default: the whole store) at ``now``."""
    window = window or Window()
    return MetricsSummary(
        compute(store, window),
        stalls_in(store, now, stall_after),
    )
