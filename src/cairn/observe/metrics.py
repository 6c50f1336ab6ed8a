"""The durability metrics, computed from what the store recorded.

* Restart success rate: of the tasks that were interrupted (taken over while
  running at least once), the share that then completed.
* Suspect re-runs: completed steps of interrupted tasks that took more than one
  call (a hint that a step recorded completed ran again; see the docs).
* Redundant-execution rate: operation keys whose function was called more
  than once, over all keys.
* Batch wall-clock (first start to last finish), compared with the median of
  its family (batches named alike but for a trailing date), and per-step-name
  duration percentiles.
* Retries, and failures by error type.
* Tokens, cost and context compression, from the agent feature's cost report.

Every definition is spelled out in docs/observability.md.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from cairn.observe.templates import step_template
from cairn.store.admin import admin
from cairn.store.protocol import Store
from cairn.store.reports import BatchSpan, Window

PERCENTILES = (50, 90, 99)
# ad-review-2026-05-24, ad-review-20260524, ad-review-2026-05-24T06 -> ad-review
_DATED = re.compile(r"^(?P<family>.+?)-\d{4}-?\d{2}-?\d{2}(?:[T_-]?[\d:]*)?$")


def family_of(batch: str) -> str:
    """The name a batch shares with its siblings of other days."""
    match = _DATED.match(batch)
    return match.group("family") if match else batch


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile: the smallest value with at least p% at or below it."""
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def error_type(text: str | None) -> str:
    """The exception type name of a recorded error (JSON {type, message, ...})."""
    if text is None:
        return "unknown"
    try:
        value = json.loads(text)
    except ValueError:
        return "unknown"
    return str(value.get("type") or "unknown") if isinstance(value, dict) else "unknown"


def _rate(part: int, whole: int) -> float | None:
    return None if whole == 0 else part / whole


@dataclass
class Restarts:
    interrupted_tasks: int
    completed_after_interruption: int
    restart_success_rate: float | None
    interruptions: int
    suspect_reruns: int
    suspect_rerun_tasks: int


@dataclass
class Redundancy:
    operation_keys: int
    redundant_keys: int
    redundant_execution_rate: float | None
    calls: int


@dataclass
class BatchTime:
    name: str
    family: str
    tasks: int
    unfinished: int
    wall_clock_seconds: float | None
    family_median_seconds: float | None
    vs_family_median: float | None


@dataclass
class StepTime:
    name: str
    count: int
    p50: float
    p90: float
    p99: float


@dataclass
class Retries:
    task_retries: int
    step_retries: int
    step_calls: int
    failed_steps: int


@dataclass
class Usage:
    """Tokens and estimated cost from the agent feature (whole store or batch)."""

    calls: int
    input_tokens: int
    output_tokens: int
    estimated_cost: float
    tokens_without_compaction: int
    context_compression_ratio: float | None


@dataclass
class Metrics:
    since: datetime | None
    until: datetime | None
    batch: str | None
    tasks_by_status: dict[str, int]
    restarts: Restarts
    redundancy: Redundancy
    batches: list[BatchTime]
    steps: list[StepTime]
    retries: Retries
    failures_by_type: dict[str, int]
    step_errors_by_type: dict[str, int]
    usage: Usage | None = None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for name in ("since", "until"):
            moment = data[name]
            data[name] = None if moment is None else moment.isoformat()
        return data


def batch_times(spans: list[BatchSpan]) -> list[BatchTime]:
    walls: dict[str, float | None] = {}
    for span in spans:
        done = span.unfinished == 0 and span.first_started_at and span.last_finished_at
        walls[span.name] = (
            (span.last_finished_at - span.first_started_at).total_seconds()
            if done and span.last_finished_at and span.first_started_at
            else None
        )
    by_family: dict[str, list[float]] = defaultdict(list)
    for span in spans:
        wall = walls[span.name]
        if wall is not None:
            by_family[family_of(span.name)].append(wall)
    times = []
    for span in spans:
        family = family_of(span.name)
        median = statistics.median(by_family[family]) if by_family[family] else None
        wall = walls[span.name]
        ratio = wall / median if wall is not None and median else None
        times.append(BatchTime(span.name, family, span.tasks, span.unfinished, wall, median, ratio))
    return times


def step_times(rows: Iterable[tuple[str, datetime, datetime]]) -> list[StepTime]:
    """Duration percentiles per step-name template (``fetch-*``, ``score[*]``), so
    a report has one line per step of the code, not per numbered step or item."""
    durations: dict[str, list[float]] = defaultdict(list)
    for name, started, finished in rows:
        durations[step_template(name)].append((finished - started).total_seconds())
    times = []
    for name in sorted(durations):
        values = sorted(durations[name])
        p50, p90, p99 = (percentile(values, p) for p in PERCENTILES)
        times.append(StepTime(name, len(values), p50, p90, p99))
    return times


def _usage(store: Store, window: Window) -> Usage | None:
    """Token usage through the agent feature's public cost report, if present."""
    try:
        from cairn.agent.costs import cost_report
    except ImportError:
        return None
    total = cost_report(store, batch=window.batch).total
    if total.calls == 0 and total.compactions == 0:
        return None
    sent = total.usage.input_tokens
    full = total.tokens_without_compaction
    return Usage(
        total.calls,
        sent,
        total.usage.output_tokens,
        round(total.cost, 6),
        full,
        _rate(sent, full),
    )


def compute(store: Store, window: Window | None = None) -> Metrics:
    """Every metric over the tasks of ``window`` (default: the whole store)."""
    window = window or Window()
    db = admin(store, "metrics")
    tasks = db.task_totals(window)
    steps = db.step_totals(window)
    ops = db.op_totals(window)
    metrics = Metrics(
        since=window.since,
        until=window.until,
        batch=window.batch,
        tasks_by_status=tasks.by_status,
        restarts=Restarts(
            tasks.interrupted,
            tasks.interrupted_completed,
            _rate(tasks.interrupted_completed, tasks.interrupted),
            tasks.interruptions,
            steps.suspect_reruns,
            steps.suspect_rerun_tasks,
        ),
        redundancy=Redundancy(
            ops.keys, ops.redundant_keys, _rate(ops.redundant_keys, ops.keys), ops.calls
        ),
        batches=batch_times(db.batch_spans(window)),
        steps=step_times(db.step_durations(window)),
        retries=Retries(tasks.task_retries, steps.retries, steps.calls, steps.failed),
        failures_by_type=dict(Counter(map(error_type, db.failed_task_errors(window)))),
        step_errors_by_type=dict(Counter(map(error_type, db.step_errors(window)))),
    )
    metrics.usage = _usage(store, window)
    if window.since is not None or window.until is not None:
        metrics.notes.append("usage (tokens, cost) covers the whole store or batch, not the window")
    return metrics
