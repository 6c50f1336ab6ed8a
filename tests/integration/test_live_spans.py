"""Live OpenTelemetry spans from the engine's observer hook, received by a real
OTLP/HTTP endpoint (protobuf decoded): one trace per batch, batch -> task ->
step and model call, a spawned child under its parent and linked to it, GenAI
attributes, spans arriving while the batch runs, several to a request. And the
hook itself: an observer that raises changes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from typer.testing import CliRunner

from cairn import Cairn, Context, Retry
from cairn.agent import user
from cairn.cli import app as cli_app
from cairn.clock import FakeClock
from cairn.engine.observer import Event
from cairn.observe.live import trace_live
from cairn.observe.notifiers import notifiers_for
from cairn.observe.otel import export_spans, provider_for
from cairn.observe.spanids import batch_span, task_span
from cairn.observe.stalls import StallWatcher
from tests.agent_server import Scripted, model_server
from tests.integration.store.test_watch import start_running
from tests.integration.test_watch import restored_logging  # noqa: F401 - the fixture
from tests.otlp_receiver import OtlpReceiver, Received

BATCH = "etl-2026-05-24"
PER_REQUEST = 4


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch span processor sends every 4 spans, and never on a timer: what
    arrives during the batch arrived because spans ended, not because time passed."""
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", str(PER_REQUEST))
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")


def run_traced(app: Cairn, otlp: OtlpReceiver, model_url: str) -> list[int]:
    """A batch of two parents (a numbered step, a model call, a spawned child);
    each child's step records how many requests had arrived when it ran."""
    client = openai.OpenAI(base_url=model_url, api_key="test", max_retries=0)
    arrived_during: list[int] = []

    @app.task(name="child")
    def child(ctx: Context, n: int) -> int:
        def look() -> int:
            otlp.wait_for_requests(1, timeout=30)
            arrived_during.append(len(otlp.requests))
            return n

        return int(ctx.step("look", look))

    @app.task(name="parent")
    def parent(ctx: Context, n: int) -> str:
        ctx.step(f"fetch-{n}", lambda: n)
        reply = ctx.llm_call([user("hi")], model="tiny", client=client)
        ctx.spawn(child, key="child", n=n)
        return str(reply.content)

    provider = trace_live(app, endpoint=otlp.url, service="etl-app")
    app.run_batch(BATCH, parent, [{"n": n} for n in range(2)], concurrency=1, progress=False)
    provider.shutdown()
    return arrived_during


def by_name(spans: list[Received], name: str) -> list[Received]:
    return [s for s in spans if s.name == name]


def test_live_spans_reach_an_otlp_endpoint(
    app: Cairn, clock: FakeClock, small_batches: None
) -> None:
    """The tree, the attributes and the batching, as the collector decoded them."""
    with OtlpReceiver() as otlp, model_server(Scripted(["ok"])) as server:
        arrived_during = run_traced(app, otlp, server.base_url)
        spans, requests = otlp.spans, list(otlp.requests)
    assert arrived_during
    assert all(count >= 1 for count in arrived_during)
    assert all(len(request) == PER_REQUEST for request in requests[:-1])
    assert len(requests) < len(spans)
    assert {s.trace_id for s in spans} == {batch_span(BATCH)[0].to_bytes(16, "big")}
    assert {s.service for s in spans} == {"etl-app"}
    [batch] = by_name(spans, "batch etl")
    assert batch.parent_span_id == b""
    parents = {s.attributes["cairn.task"]: s for s in by_name(spans, "task parent")}
    children = by_name(spans, "task child")
    assert len(parents) == 2
    assert len(children) == 2
    assert all(p.parent_span_id == batch.span_id for p in parents.values())
    for kid in children:
        mother = parents[kid.attributes["cairn.parent"]]
        assert kid.parent_span_id == mother.span_id
        assert kid.links == [(mother.trace_id, mother.span_id)]
    steps = by_name(spans, "step fetch-*")
    assert len(steps) == 2
    assert {s.parent_span_id for s in steps} == {p.span_id for p in parents.values()}
    calls = [s for s in spans if s.attributes.get("cairn.kind") == "llm"]
    assert len(calls) == 2
    for call in calls:
        assert call.name == f"chat {call.attributes['gen_ai.request.model']}"
        assert call.attributes["gen_ai.operation.name"] == "chat"
        assert call.attributes["gen_ai.usage.input_tokens"] > 0
        assert call.attributes["gen_ai.usage.output_tokens"] > 0
    assert not any(any(ch.isdigit() for ch in s.name.split(" ", 1)[1]) for s in steps)
    record = app.store.get_task(f"{BATCH}/n=0")
    assert record is not None
    expected = task_span(record.id, record.fence, BATCH, record.id)[1]
    assert parents[record.id].span_id == expected.to_bytes(8, "big")


def test_an_observer_that_raises_changes_nothing(
    app: Cairn, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Every boundary reaches the observer; what it raises is logged and the
    task's outcome is the same."""
    seen: list[Event] = []

    def nosy(event: Event) -> None:
        seen.append(event)
        raise RuntimeError("observer bug")

    @app.task(name="steady")
    def steady(ctx: Context, n: int) -> Any:
        return ctx.step("double", lambda: n * 2)

    app.observer = nosy
    report = app.run_batch("steady-1", steady, [{"n": 1}], progress=False)
    assert report.ok
    assert app.store.get_task("steady-1/n=1") is not None
    points = [e.point for e in seen]
    assert points == [
        "batch_started", "task_started", "call_started", "call_returned", "task_ended",
        "batch_ended",
    ]  # fmt: skip
    assert "the observer failed on call_started" in caplog.text


def test_export_after_the_fact_gives_the_live_ids(
    app: Cairn, clock: FakeClock, small_batches: None
) -> None:
    """`cairn otel-export` of a batch traced live emits the spans the collector
    has already (same trace and span ids, same names), not new ones."""
    with OtlpReceiver() as otlp, model_server(Scripted(["ok"])) as server:
        run_traced(app, otlp, server.base_url)
        live = {(s.trace_id, s.span_id, s.parent_span_id, s.name) for s in otlp.spans}
    exporter = InMemorySpanExporter()
    provider = provider_for(exporter, "etl-app")
    assert export_spans(app.store, provider, batch=BATCH) == 4
    provider.shutdown()
    later = {
        (
            s.context.trace_id.to_bytes(16, "big"),
            s.context.span_id.to_bytes(8, "big"),
            s.parent.span_id.to_bytes(8, "big") if s.parent else b"",
            s.name,
        )
        for s in exporter.get_finished_spans()
        if not s.name.startswith("spawn ")  # an entry live tracing has no span for
    }
    assert len(later) == 11
    assert later == live


@pytest.mark.parametrize("include_internal", [False, True])
def test_cairns_own_tasks_make_no_live_spans(
    app: Cairn, clock: FakeClock, include_internal: bool
) -> None:
    """A stall alert runs as a task of the traced app: no span unless asked for."""
    start_running(app, clock, "crawl/1")
    clock.advance(3600)
    exporter = InMemorySpanExporter()
    provider = trace_live(app, exporter=exporter, include_internal=include_internal)
    assert StallWatcher(app, notifiers_for(), stall_after=60).check().raised == ["crawl/1"]
    provider.shutdown()
    names = {span.name for span in exporter.get_finished_spans()}
    assert ("task cairn.observe.alert" in names) is include_internal
    assert bool(names) is include_internal


WORKER_APP = """
from cairn import Cairn, Context, Retry

app = Cairn()


@app.task
def tidy(ctx: Context, n: int) -> int:
    return ctx.step(f"tidy-{n}", lambda: n)
"""


@pytest.mark.usefixtures("restored_logging")
def test_worker_sends_live_spans(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`cairn worker --otlp URL --service NAME --burst` traces the tasks it runs:
    each task's span and its step's, under the service name, sent before it exits."""
    store = f"sqlite:///{tmp_path / 'cairn.db'}"
    (tmp_path / "traced_worker_app.py").write_text(WORKER_APP)
    monkeypatch.chdir(tmp_path)
    with Cairn(store) as owner:

        @owner.task(name="tidy")
        def tidy(ctx: Context, n: int) -> int:
            return n

        owner.enqueue("tidy-1", tidy, [{"n": n} for n in range(3)])
    with OtlpReceiver() as otlp:
        args = ["worker", "traced_worker_app:app", "--burst", "--store", store]
        result = CliRunner().invoke(cli_app, [*args, "--otlp", otlp.url, "--service", "tidier"])
        assert result.exit_code == 0, result.output
        spans = otlp.spans
    assert sorted(s.name for s in spans) == ["step tidy-*"] * 3 + ["task tidy"] * 3
    assert {s.service for s in spans} == {"tidier"}


def test_async_tasks_reach_the_observer(app: Cairn, clock: FakeClock) -> None:
    """An async batch tells the observer the same boundaries, a failing call's
    retry included (call numbers 1 then 2)."""
    seen: list[Event] = []
    tries: list[int] = []

    async def flaky() -> int:
        tries.append(1)
        if len(tries) == 1:
            raise OSError("once")
        return 7

    @app.task(name="later")
    async def later(ctx: Context, n: int) -> int:
        return int(await ctx.step("flaky", flaky, retry=Retry(attempts=2, initial_delay=0.0)))

    app.observer = seen.append
    assert app.run_batch("later-1", later, [{"n": 1}], progress=False).ok
    calls = [(e.point, e.call, e.status) for e in seen if e.point.startswith("call_")]
    assert calls == [
        ("call_started", 1, None), ("call_failed", 1, "retrying"),
        ("call_started", 2, None), ("call_returned", 2, None),
    ]  # fmt: skip
    assert [e.point for e in seen if not e.point.startswith("call_")] == [
        "batch_started", "task_started", "task_ended", "batch_ended",
    ]  # fmt: skip
    assert next(e for e in seen if e.point == "task_ended").status == "completed"
