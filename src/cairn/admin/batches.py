"""One batch's progress: counts by status, rate and ETA, failures grouped by
error type, and its slowest kinds of step.

The rate is the batch's finished tasks over the time since its first task
started (to now, or to its last finish once nothing is left to do): a batch
that paused shows a slower rate, which is what its ETA should assume too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from cairn.admin.views import error_view
from cairn.observe.step_names import StepGroup, step_groups
from cairn.store import AdminStore
from cairn.store.records import FINISHED_STATUSES, TASK_STATUSES, BatchSummary, TaskRecord
from cairn.store.reports import Window

__all__ = ["BatchView", "FailureGroup", "SlowStep", "batch_view", "status_counts"]

# A batch view lists this many kinds of step, slowest first.
SLOWEST = 10
SlowStep = StepGroup


@dataclass(frozen=True, slots=True)
class FailureGroup:
    """The failed tasks of one error type, with one of them as an example."""

    error_type: str
    count: int
    example_task_id: str
    example_message: str


@dataclass(frozen=True, slots=True)
class BatchView:
    """A batch's progress. ``counts`` holds every task status (0 included);
    ``done`` counts finished tasks (completed, failed or cancelled)."""

    name: str
    counts: dict[str, int]
    total: int
    done: int
    rate_per_minute: float | None
    eta_seconds: float | None
    failures: list[FailureGroup]
    slowest_steps: list[SlowStep]
    # The batch's row as listed: its task function, when made, first start, last finish.
    summary: BatchSummary


def status_counts(summary: BatchSummary) -> dict[str, int]:
    """The batch's tasks by status, every status present (0 included), in order."""
    return {status: summary.counts.get(status, 0) for status in TASK_STATUSES}


def _failures(failed: Iterable[TaskRecord]) -> list[FailureGroup]:
    counts: Counter[str] = Counter()
    examples: dict[str, tuple[str, str]] = {}
    for task in failed:
        error = error_view(task.error)
        kind = "unknown" if error is None else error.type
        counts[kind] += 1
        examples.setdefault(kind, (task.id, "" if error is None else error.message))
    return [
        FailureGroup(kind, n, *examples[kind])
        for kind, n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    ]


def pace(summary: BatchSummary, done: int, now: datetime) -> tuple[float | None, float | None]:
    """(finished tasks per minute, seconds left at that rate). A task waiting for
    a signal (``ctx.wait_for``) is not counted as left: it ends when someone
    answers it, not at the batch's rate."""
    started = summary.first_started_at
    if started is None or done == 0:
        return None, None
    left = summary.total - done - summary.counts.get("waiting", 0)
    until = summary.last_finished_at if left <= 0 and summary.last_finished_at else now
    minutes = (until - started).total_seconds() / 60
    if minutes <= 0:
        return None, None
    rate = done / minutes
    if left <= 0 and summary.counts.get("waiting"):
        return rate, None  # only tasks waiting for a signal are left: no rate can say when
    return rate, left / rate * 60


def batch_view(store: AdminStore, name: str, now: datetime) -> BatchView | None:
    """The progress of batch ``name`` at ``now``, or None if there is no such batch."""
    found = store.batch_summaries(name)
    if not found:
        return None
    summary = found[0]
    counts = status_counts(summary)
    done = sum(n for status, n in counts.items() if status in FINISHED_STATUSES)
    rate, eta = pace(summary, done, now)
    steps = step_groups(store.step_durations(Window(batch=name)))
    return BatchView(
        name=name,
        summary=summary,
        counts=counts,
        total=summary.total,
        done=done,
        rate_per_minute=rate,
        eta_seconds=eta,
        failures=_failures(store.list_tasks(batch=name, status="failed")),
        slowest_steps=steps[:SLOWEST],
    )
