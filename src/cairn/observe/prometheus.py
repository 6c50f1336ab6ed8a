"""A Prometheus exporter: the metrics, computed from the store at each scrape.

``pip install 'cairn[prometheus]'``. ``cairn metrics --serve :9464`` serves
``/metrics``; ``collector(store)`` plugs the same numbers into a registry of
your own. Each scrape reads the store (a few aggregate queries), so scrape every
15 s or slower on a large store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cairn.errors import ConfigurationError
from cairn.observe.metrics import Metrics, compute
from cairn.store.admin import admin
from cairn.store.protocol import Store
from cairn.store.reports import Window

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric


def _client() -> Any:
    try:
        import prometheus_client
    except ImportError as exc:
        raise ConfigurationError(
            "the Prometheus exporter needs prometheus-client: pip install 'cairn[prometheus]'"
        ) from exc
    return prometheus_client


def _gauge(name: str, doc: str, value: float | None) -> Metric:
    from prometheus_client.core import GaugeMetricFamily

    family = GaugeMetricFamily(name, doc)
    if value is not None:
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


def families(metrics: Metrics, checkpoints: list[tuple[str, str, float]]) -> Iterator[Metric]:
    """The metrics as Prometheus families (all gauges: each is recomputed at a scrape)."""
    yield from _task_families(metrics)
    yield from _time_families(metrics, checkpoints)


def _task_families(metrics: Metrics) -> Iterator[Metric]:
    """Tasks, restarts, redundancy, retries and failures."""
    r, o, t = metrics.restarts, metrics.redundancy, metrics.retries
    yield _labelled(
        "cairn_tasks",
        "Tasks by status.",
        ["status"],
        [([s], n) for s, n in sorted(metrics.tasks_by_status.items())],
    )
    yield _gauge("cairn_interrupted_tasks", "Tasks taken over while running.", r.interrupted_tasks)
    yield _gauge(
        "cairn_interrupted_tasks_completed",
        "Interrupted tasks that then completed.",
        r.completed_after_interruption,
    )
    yield _gauge(
        "cairn_restart_success_ratio",
        "Completed share of interrupted tasks.",
        r.restart_success_rate,
    )
    yield _gauge(
        "cairn_suspect_reruns",
        "Completed steps of interrupted tasks that took more than one call.",
        r.suspect_reruns,
    )
    yield _gauge("cairn_operation_keys", "Operation keys.", o.operation_keys)
    yield _gauge("cairn_operation_keys_redundant", "Keys called more than once.", o.redundant_keys)
    yield _gauge(
        "cairn_redundant_execution_ratio",
        "Share of operation keys called more than once.",
        o.redundant_execution_rate,
    )
    yield _gauge("cairn_task_retries", "Task attempts after the first.", t.task_retries)
    yield _gauge("cairn_step_retries", "Step calls after the first.", t.step_retries)
    yield _labelled(
        "cairn_failed_tasks",
        "Failed tasks by error type.",
        ["error_type"],
        [([k], v) for k, v in sorted(metrics.failures_by_type.items())],
    )


def _time_families(metrics: Metrics, checkpoints: list[tuple[str, str, float]]) -> Iterator[Metric]:
    """Batch wall-clock, step durations, and each running task's last checkpoint."""
    yield _labelled(
        "cairn_batch_wall_clock_seconds",
        "First start to last finish of finished batches.",
        ["batch", "family"],
        [
            ([b.name, b.family], b.wall_clock_seconds)
            for b in metrics.batches
            if b.wall_clock_seconds is not None
        ],
    )
    yield _labelled(
        "cairn_step_duration_seconds",
        "Step duration percentiles (nearest rank).",
        ["step", "quantile"],
        [
            ([s.name, q], v)
            for s in metrics.steps
            for q, v in (("0.5", s.p50), ("0.9", s.p90), ("0.99", s.p99))
        ],
    )
    yield _labelled(
        "cairn_seconds_since_last_checkpoint",
        "Per running task: seconds since it last moved.",
        ["task", "batch"],
        [([task, batch], seconds) for task, batch, seconds in checkpoints],
    )


class StoreCollector:
    """A prometheus_client collector reading ``store`` at each scrape."""

    def __init__(self, store: Store, window: Window, now: Callable[[], datetime]) -> None:
        self.store = store
        self.window = window
        self.now = now

    def collect(self) -> Iterator[Metric]:
        metrics = compute(self.store, self.window)
        moment = self.now()
        checkpoints = [
            (t.task_id, t.batch or "", (moment - t.checkpoint).total_seconds())
            for t in admin(self.store, "metrics").running_checkpoints()
        ]
        yield from families(metrics, checkpoints)


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
