"""run_streamed(): an Agents SDK Runner.run_streamed inside a cairn task, every
model call and tool call recorded, the model's events streamed as they arrive.

In-process crashes (a fault hook raising ``Crash``, a restarted app on the same
store); the model is the SDK's Chat Completions model on the simulated server,
which streams (``server.streams``) and counts requests.
"""

from __future__ import annotations

from typing import Any

import pytest

from cairn import Cairn, Context, TaskDef
from cairn.agent.costs import cost_report
from cairn.agent.simulate import SimulatedModelServer
from cairn.clock import FakeClock
from cairn.engine.observer import Event
from cairn.integrations.openai_agents import run_streamed
from cairn.testing import set_fault_hook
from tests.agent_server import Crash, crash_at, resume
from tests.agents_sdk import sdk_model
from tests.integration.test_agents_sdk_run import ANSWER, Notes, agent_of, script


def streamed_task(app: Cairn, agent: Any, events: list[str]) -> TaskDef[..., Any]:
    """Streams the run; ``events`` gets each raw event's type, as it arrives."""

    @app.task(name="agent")
    async def agent_task(ctx: Context, goal: str) -> dict[str, Any]:
        result = run_streamed(ctx, agent(), goal)
        deltas = []
        async for event in result.stream_events():
            if event.type == "raw_response_event":
                events.append(event.data.type)
                if event.data.type == "response.output_text.delta":
                    deltas.append(event.data.delta)
        return {"answer": str(result.final_output), "streamed": "".join(deltas)}

    return agent_task


def test_a_streamed_run_resumes_without_a_recorded_request_and_streams_the_rest(
    store_url: str, clock: FakeClock
) -> None:
    """Crashed after its second recorded response, the streamed run resumes in
    a new app: the server gets only the requests not recorded yet, each
    streamed (four in all, none twice), each tool runs once per call, the
    answer's text arrives as deltas live (and to the app's observer), and cairn cost counts what the
    server counted; on every backend."""
    notes = Notes()
    with SimulatedModelServer(script()) as server:
        model = sdk_model(server)
        app = Cairn(store_url, clock=clock)
        set_fault_hook(app, crash_at("after_llm", 2))
        first: list[str] = []
        with pytest.raises(Crash), app:
            app.run(
                streamed_task(app, lambda: agent_of(model, notes), first), task_id="t", goal="x"
            )
        assert (server.requests, notes.calls) == (2, [0])
        assert first.count("response.completed") == 1  # the second was never handed over
        resumed: list[str] = []
        with resume(store_url, clock) as other:
            told: list[Event] = []
            other.observer = told.append
            task = streamed_task(other, lambda: agent_of(model, notes), resumed)
            result = other.run(task, task_id="t", goal="x")
            report = cost_report(other.store)
        assert (server.requests, server.repeats, server.streams) == (4, 0, 4)
        counted = (server.prompt_tokens, server.completion_tokens)
    assert result == {"answer": ANSWER, "streamed": ANSWER}
    # The live text went to the app's observer too (the lane's source, cairn.observe.lane).
    assert "".join(str(e.value) for e in told if e.point == "call_chunk") == ANSWER
    assert notes.calls == [0, 1, 2]
    # Two replayed calls (their completed events only), two live ones.
    assert resumed.count("response.completed") == 4
    assert resumed.count("response.output_text.delta") >= 2
    assert report.total.calls == 4
    assert (report.total.usage.input_tokens, report.total.usage.output_tokens) == counted
