"""A Prometheus exporter: the metrics, computed from the store at each scrape.

``pip install 'cairn-durable[prometheus]'``. ``cairn metrics --serve :9464`` serves
``/metrics``; ``StoreCollector(store, window, now)`` plugs the same numbers
into a registry of your own. The families follow Prometheus' conventions
(docs/observability.md lists them): counters end in ``_total``, durations are
histograms, and no label takes a task id, a batch name or a map item, so the
number of series depends on the code, not on the number of tasks. Each scrape
runs a few aggregate queries; the step histograms read only the rows finished
since the previous scrape (``cairn.observe.histograms``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cairn.errors import ConfigurationError
from cairn.observe.histograms import Histogram, StepHistograms
from cairn.observe.metrics import BatchTime, batch_times, error_type
from cairn.observe.templates import step_template
from cairn.store.admin import admin
from cairn.store.protocol import Store
from cairn.store.reports import OpTotals, TaskTotals, Window

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric


def _client() -> Any:
    try:
        import prometheus_client
    except ImportError as exc:
        raise ConfigurationError(
            "the Prometheus exporter needs prometheus-client: "
            "pip install 'cairn-durable[prometheus]'"
        ) from exc
    return prometheus_client


STATUSES = ("pending", "running", "waiting", "completed", "failed", "cancelled")
MAX_ERROR_TYPES = 20


def _gauge(name: str, doc: str, value: float | None) -> Metric:
    from prometheus_client.core import GaugeMetricFamily

    family = GaugeMetricFamily(name, doc)
    if value is not None:
        family.add_metric([], value)
    return family


def _counter(name: str, doc: str, value: float) -> Metric:
    from prometheus_client.core import CounterMetricFamily

    family = CounterMetricFamily(name, doc)  # the client adds the _total suffix
    family.add_metric([], value)
    return family


def _labelled(
    name: str, doc: str, labels: list[str], rows: list[tuple[list[str], float]]
) -> Metric:
    from prometheus_client.core import GaugeMetricFamily

    family = GaugeMetricFamily(name, doc, labels=labels)
    for values, value in rows:
        family.add_metric(values, value)
    return family


@dataclass(frozen=True)
class Scrape:
    """What one scrape read: cheap aggregates, plus the running histograms."""

    tasks: TaskTotals
    ops: OpTotals
    suspects: tuple[int, int]
    failures: dict[str, int]
    batches: list[BatchTime]
    oldest_checkpoint_seconds: float
    steps: dict[tuple[str, str], Histogram]


def families(scrape: Scrape) -> Iterator[Metric]:
    """The scrape as Prometheus families: gauges for what is now, counters
    (``_total``) for what only accumulates, histograms for durations."""
    yield from _task_families(scrape)
    yield from _batch_families(scrape)
    yield from _step_families(scrape.steps)


def _task_families(scrape: Scrape) -> Iterator[Metric]:
    """Tasks, restarts, redundancy, retries and failures."""
    t, o = scrape.tasks, scrape.ops
    yield _labelled(
        "cairn_tasks",
        "Tasks by status (every status, 0 included).",
        ["status"],
        [([s], t.by_status.get(s, 0)) for s in STATUSES],
    )
    yield _gauge("cairn_interrupted_tasks", "Tasks taken over while running.", t.interrupted)
    yield _gauge(
        "cairn_interrupted_tasks_completed",
        "Interrupted tasks that then completed.",
        t.interrupted_completed,
    )
    yield _gauge(
        "cairn_restart_success_ratio",
        "Completed share of interrupted tasks (absent when none was interrupted).",
        None if t.interrupted == 0 else t.interrupted_completed / t.interrupted,
    )
    yield _counter("cairn_task_interruptions", "Take-overs of running tasks.", t.interruptions)
    yield _counter("cairn_task_retries", "Task attempts after the first.", t.task_retries)
    yield _gauge(
        "cairn_suspect_reruns",
        "Completed steps of interrupted tasks that took more than one call.",
        scrape.suspects[0],
    )
    yield _gauge("cairn_operation_keys", "Operation keys.", o.keys)
    yield _gauge("cairn_operation_keys_redundant", "Keys called more than once.", o.redundant_keys)
    yield _counter("cairn_operation_calls", "Calls made under operation keys.", o.calls)
    yield _gauge(
        "cairn_redundant_execution_ratio",
        "Share of operation keys called more than once (absent when there are none).",
        None if o.keys == 0 else o.redundant_keys / o.keys,
    )
    yield _labelled(
        "cairn_failed_tasks",
        f"Failed tasks by error type (the {MAX_ERROR_TYPES} commonest; the rest as other).",
        ["error_type"],
        [([k], v) for k, v in sorted(scrape.failures.items())],
    )


def _batch_families(scrape: Scrape) -> Iterator[Metric]:
    """Batches (by state, and the latest wall-clock of each family) and stalls."""
    finished = [b for b in scrape.batches if b.wall_clock_seconds is not None]
    yield _labelled(
        "cairn_batches",
        "Batches by state: finished (no pending, running or waiting task) or not.",
        ["state"],
        [(["finished"], len(finished)), (["unfinished"], len(scrape.batches) - len(finished))],
    )
    latest: dict[str, float] = {}
    for batch in sorted(finished, key=lambda b: b.name):
        latest[step_template(batch.family)] = batch.wall_clock_seconds or 0.0
    yield _labelled(
        "cairn_batch_family_wall_clock_seconds",
        "Per batch family: first start to last finish of its last finished batch.",
        ["family"],
        [([family], seconds) for family, seconds in sorted(latest.items())],
    )
    yield _gauge(
        "cairn_running_oldest_checkpoint_age_seconds",
        "Seconds since the running task that moved least recently last moved (0: none runs).",
        scrape.oldest_checkpoint_seconds,
    )


def _step_families(groups: dict[tuple[str, str], Histogram]) -> Iterator[Metric]:
    from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

    durations = HistogramMetricFamily(
        "cairn_step_duration_seconds",
        "Durations of completed steps (kind step) and model calls (kind llm), by name template.",
        labels=["kind", "step"],
    )
    retries = CounterMetricFamily(
        "cairn_step_retries",
        "Calls after the first of completed steps and model calls, by name template.",
        labels=["kind", "step"],
    )
    for (kind, step), histogram in sorted(groups.items()):
        durations.add_metric([kind, step], histogram.cumulative(), histogram.total)
        retries.add_metric([kind, step], histogram.retries)
    yield durations
    yield retries


def _top(counts: dict[str, int]) -> dict[str, int]:
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    top = dict(ranked[:MAX_ERROR_TYPES])
    rest = sum(n for _, n in ranked[MAX_ERROR_TYPES:])
    if rest:
        top["other"] = top.get("other", 0) + rest
    return top


class StoreCollector:
    """A prometheus_client collector reading ``store`` at each scrape."""

    def __init__(self, store: Store, window: Window, now: Callable[[], datetime]) -> None:
        self.store = store
        self.window = window
        self.now = now
        self.steps = StepHistograms(window, since=now())

    def read(self) -> Scrape:
        db = admin(self.store, "metrics")
        moment = self.now()
        ages = [(moment - t.checkpoint).total_seconds() for t in db.running_checkpoints()]
        tasks, spans = db.task_summary(self.window)
        return Scrape(
            tasks=tasks,
            ops=db.op_totals(self.window),
            suspects=db.suspect_reruns(self.window),
            failures=_top(Counter(map(error_type, db.failed_task_errors(self.window)))),
            batches=batch_times(spans),
            oldest_checkpoint_seconds=max([0.0, *ages]),
            steps=self.steps.refresh(db),
        )

    def collect(self) -> Iterator[Metric]:
        yield from families(self.read())


def registry_for(store: Store, window: Window, now: Callable[[], datetime]) -> Any:
    """A fresh registry holding only cairn's collector."""
    client = _client()
    registry = client.CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store, window, now))
    return registry


def parse_address(text: str) -> tuple[str, int]:
    """``:9464`` -> ("127.0.0.1", 9464); ``0.0.0.0:9464`` as given."""
    host, _, port = text.rpartition(":")
    if not port.isdigit():
        raise ConfigurationError(f"{text!r} is not [HOST]:PORT, e.g. :9464 or 0.0.0.0:9464")
    return host or "127.0.0.1", int(port)


def start_server(registry: Any, address: str) -> tuple[Any, Any]:
    """Serve ``registry`` at ``address``; returns (server, thread)."""
    host, port = parse_address(address)
    server, thread = _client().start_http_server(port, addr=host, registry=registry)
    return server, thread
