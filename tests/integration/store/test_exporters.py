"""Exporters: Prometheus scraped over real HTTP, parsed with prometheus_client's
own parser and checked with promtool; OpenTelemetry spans built from the recorded times."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from cairn import Cairn, Context, Retry, TaskDef
from cairn.agent import user
from cairn.clock import FakeClock
from cairn.errors import TaskWaiting
from cairn.observe.notifiers import notifiers_for
from cairn.observe.otel import export_spans
from cairn.observe.prometheus import registry_for, start_server
from cairn.observe.stalls import StallWatcher
from cairn.store.admin import admin
from cairn.store.records import NewTask
from cairn.store.reports import Window
from tests.agent_server import Scripted, model_server

BATCH = "etl-2026-05-24"
ROOT = Path(__file__).resolve().parents[3]


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


def scrape_text(url: str) -> str:
    return httpx.get(f"{url}/metrics", timeout=5).text


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(scrape_text(url)):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def series(text: str) -> int:
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


def promtool_check(text: str) -> None:
    """``promtool check metrics`` accepts ``text`` (CI installs promtool)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (apt-get install prometheus; .ci/run does)")
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def mixed_tasks(app: Cairn, clock: FakeClock, model: str) -> tuple[TaskDef[..., Any], ...]:
    """A task with a failed case, a step that fails once then completes, a
    numbered step, a map over ``items`` items and a model call; and one that waits."""
    flaky: set[str] = set()

    @app.task(name="mixed")
    def mixed(ctx: Context, n: int, items: int) -> int:
        def once_flaky() -> int:
            if ctx.task_id not in flaky:
                flaky.add(ctx.task_id)
                raise OSError("first call fails")
            clock.advance(0.5)
            return n

        if n == 1:
            raise KeyError("missing")
        ctx.step(f"fetch-{n}", once_flaky, retry=Retry(attempts=2, initial_delay=0.0))
        ctx.map(lambda i: i * 2, range(items), name="score")
        ctx.llm_call([user("hi")], model="tiny", client=model_client(model))
        return n

    @app.task(name="approval")
    def approval(ctx: Context) -> str:
        return str(ctx.wait_for("go").payload)

    return mixed, approval


def run_mixed(app: Cairn, tasks: tuple[TaskDef[..., Any], ...], batch: str, items: int) -> None:
    """A batch of three ``mixed`` tasks (one fails) and a waiting task."""
    mixed, approval = tasks
    app.run_batch(
        batch, mixed, [{"n": n, "items": items} for n in range(3)], concurrency=1, progress=False
    )
    with pytest.raises(TaskWaiting):
        app.run(approval, task_id=f"{batch}/approval")


def model_client(base_url: str) -> Any:
    import openai

    return openai.OpenAI(base_url=base_url, api_key="test", max_retries=0)


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
    """The scrape follows Prometheus' conventions (promtool accepts it) and
    carries every status, failures by type, step histograms by template, and the
    oldest checkpoint of a running task; more tasks and map items add no series."""
    with model_server(Scripted(["ok"])) as server:
        tasks = mixed_tasks(any_app, clock, server.base_url)
        run_mixed(any_app, tasks, BATCH, 3)
        any_app.store.create_task(NewTask("slow/1", "slow", "{}", "json"), clock.now())
        lease = clock.now() + timedelta(hours=1)
        assert any_app.store.claim_task("slow/1", 0, "elsewhere/1/0/n", lease, clock.now())
        clock.advance(42)
        first = scrape_text(served)
        run_mixed(any_app, tasks, "etl-2026-05-25", 30)
        second = scrape_text(served)
    promtool_check(second)
    assert series(first) == series(second)
    samples = scrape(served)
    for status, count in [("completed", 4), ("failed", 2), ("running", 1), ("waiting", 2)]:
        assert samples[("cairn_tasks", (("status", status),))] == count
    assert samples[("cairn_tasks", (("status", "cancelled"),))] == 0
    assert samples[("cairn_failed_tasks", (("error_type", "builtins.KeyError"),))] == 2
    fetch = (("kind", "step"), ("step", "fetch-*"))
    assert samples[("cairn_step_duration_seconds_count", fetch)] == 4
    assert samples[("cairn_step_duration_seconds_sum", fetch)] == 2.0
    assert samples[("cairn_step_retries_total", fetch)] == 4
    score = (("kind", "step"), ("step", "score[*]"))
    assert samples[("cairn_step_duration_seconds_count", score)] == 2 * 3 + 2 * 30
    llm = (("kind", "llm"), ("step", "llm"))
    assert samples[("cairn_step_duration_seconds_count", llm)] == 4
    assert samples[("cairn_running_oldest_checkpoint_age_seconds", ())] >= 42.0
    assert samples[("cairn_batches", (("state", "finished"),))] == 2
    assert ("cairn_batch_family_wall_clock_seconds", (("family", "etl"),)) in samples
    assert not any("task" in dict(labels) or "batch" in dict(labels) for _, labels in samples)
    assert dashboard_metrics() <= exposed_names(second)


def dashboard_metrics() -> set[str]:
    """The metric names the Grafana dashboard under docs/ queries."""
    dashboard = json.loads((ROOT / "docs" / "grafana" / "cairn-dashboard.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    found = {name for expr in exprs for name in re.findall(r"cairn_[a-z_]+", expr)}
    assert found
    return found


def exposed_names(text: str) -> set[str]:
    """Every name a scrape can carry: the families, and a histogram's series."""
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names.add(name)
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_count", f"{name}_sum"}
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


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
        assert attrs[id(step)]["cairn.call"] == 1
        history = any_app.store.load_history(str(attrs[id(step)]["cairn.task"]))
        recorded = next(h for h in history.values() if h.name == "extract")
        assert step.end_time is not None
        assert step.start_time is not None
        assert step.end_time - step.start_time == int(
            (recorded.finished_at - recorded.started_at).total_seconds() * 1e9
        )
    assert not tasks[f"{BATCH}/n=1"].status.is_ok
    provider.shutdown()


def test_otel_leaves_out_cairns_own_tasks(any_app: Cairn, clock: FakeClock) -> None:
    """A stall alert is a task cairn runs for itself: not exported unless asked."""
    any_app.store.create_task(NewTask("slow/2", "slow", "{}", "json"), clock.now())
    lease = clock.now() + timedelta(days=1)
    assert any_app.store.claim_task("slow/2", 0, "elsewhere/1/0/n", lease, clock.now())
    clock.advance(3600)
    assert StallWatcher(any_app, notifiers_for(), stall_after=60).check().raised == ["slow/2"]
    provider = TracerProvider()
    assert export_spans(any_app.store, provider) == 0
    assert export_spans(any_app.store, provider, include_internal=True) == 1
    provider.shutdown()


def test_task_summary_is_the_totals_and_spans_in_one_scan(any_app: Cairn, clock: FakeClock) -> None:
    """The exporter's one-scan summary equals task_totals and batch_spans."""
    with model_server(Scripted(["ok"])) as server:
        tasks = mixed_tasks(any_app, clock, server.base_url)
        run_mixed(any_app, tasks, BATCH, 2)
        run_mixed(any_app, tasks, "etl-2026-05-25", 1)
    db = admin(any_app.store, "test")
    for window in (Window(), Window(batch=BATCH)):
        assert db.task_summary(window) == (db.task_totals(window), db.batch_spans(window))
