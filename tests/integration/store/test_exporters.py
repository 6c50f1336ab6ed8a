"""Exporters: Prometheus scraped over real HTTP and parsed with prometheus_client's
own parser; OpenTelemetry spans built from the recorded times."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from cairn import Cairn, Context
from cairn.clock import FakeClock
from cairn.observe.otel import export_spans
from cairn.observe.prometheus import registry_for, start_server
from cairn.store.records import NewTask
from cairn.store.reports import Window

BATCH = "etl-2026-05-24"


def run_batch(app: Cairn, clock: FakeClock) -> None:
    @app.task(name="etl")
    def etl(ctx: Context, n: int) -> int:
        def extract() -> int:
            clock.advance(1.0 + n)
            return n

        if n == 1:
            raise KeyError("missing")
        return int(ctx.step("extract", extract))

    app.run_batch(BATCH, etl, [{"n": n} for n in range(3)], concurrency=1, progress=False)


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


@pytest.fixture
def served(any_app: Cairn, clock: FakeClock) -> Iterator[str]:
    """The Prometheus endpoint of the test's store, on a free local port."""
    server, thread = start_server(registry_for(any_app.store, Window(), clock.now), "127.0.0.1:0")
    host, port = server.server_address[:2]
    yield f"http://{host}:{port}"
    server.shutdown()
    server.server_close()
    thread.join()


def test_prometheus_scrape(any_app: Cairn, clock: FakeClock, served: str) -> None:
    """The scrape carries the task counts, failures by type, step percentiles, and
    seconds since the last checkpoint of a running task."""
    run_batch(any_app, clock)
    any_app.store.create_task(NewTask("slow/1", "slow", "{}", "json"), clock.now())
    lease = clock.now() + timedelta(hours=1)
    assert any_app.store.claim_task("slow/1", 0, "elsewhere/1/0/n", lease, clock.now())
    clock.advance(42)
    samples = scrape(served)
    assert samples[("cairn_tasks", (("status", "completed"),))] == 2
    assert samples[("cairn_tasks", (("status", "failed"),))] == 1
    assert samples[("cairn_tasks", (("status", "running"),))] == 1
    assert samples[("cairn_failed_tasks", (("error_type", "builtins.KeyError"),))] == 1
    assert samples[("cairn_interrupted_tasks", ())] == 0
    p99 = ("cairn_step_duration_seconds", (("quantile", "0.99"), ("step", "extract")))
    assert samples[p99] == 3.0  # n = 2 took 1 + 2 seconds
    since = ("cairn_seconds_since_last_checkpoint", (("batch", ""), ("task", "slow/1")))
    assert samples[since] == 42.0
    assert ("cairn_batch_wall_clock_seconds", (("batch", BATCH), ("family", "etl"))) in samples


def test_otel_spans_from_the_record(any_app: Cairn, clock: FakeClock) -> None:
    """One span per finished task and a child per step, with the recorded times
    and the task, step and attempt attributes; failed ones have error status."""
    run_batch(any_app, clock)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    assert export_spans(any_app.store, provider, batch=BATCH) == 3
    spans = exporter.get_finished_spans()
    attrs = {id(s): dict(s.attributes or {}) for s in spans}
    tasks = {attrs[id(s)]["cairn.task"]: s for s in spans if s.name == "task etl"}
    steps = [s for s in spans if s.name == "step extract"]
    assert set(tasks) == {f"{BATCH}/n={n}" for n in range(3)}
    assert len(steps) == 2
    for step in steps:
        parent = tasks[attrs[id(step)]["cairn.task"]]
        assert step.parent is not None
        assert step.parent.span_id == parent.context.span_id
        assert attrs[id(step)]["cairn.step"] == "extract"
        assert attrs[id(step)]["cairn.attempt"] == 1
        history = any_app.store.load_history(str(attrs[id(step)]["cairn.task"]))
        recorded = next(h for h in history.values() if h.name == "extract")
        assert step.end_time is not None
        assert step.start_time is not None
        assert step.end_time - step.start_time == int(
            (recorded.finished_at - recorded.started_at).total_seconds() * 1e9
        )
    assert not tasks[f"{BATCH}/n=1"].status.is_ok
    provider.shutdown()
