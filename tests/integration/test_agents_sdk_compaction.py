"""Compaction inside one ``Runner.run`` (``run(..., compact_in_run=True)``): the
session's threshold bounds every model request of a long run, and a run
resumed after a crash sends the same.

The agent reads 17 documents, one tool call a turn, in one ``run()`` with a
``CairnSession`` inside the task; the model is the simulated OpenAI server,
which counts each request's prompt as it receives it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, function_tool
from agents.run_config import CallModelData, ModelInputData

from cairn import Cairn, Context
from cairn.agent import ExtractiveSummarizer
from cairn.agent.simulate import SimulatedModelServer
from cairn.agent.tokens import count_message, count_messages
from cairn.clock import FakeClock
from cairn.integrations.openai_agents import CairnSession, run
from cairn.store import admin
from cairn.testing import set_fault_hook
from tests.agent_server import Crash, Scripted, crash_at, resume
from tests.agents_sdk import sdk_model, tool_call

CALLS = 18
THRESHOLD = 600
INSTRUCTIONS = "Read every document."


@function_tool
def read(n: int) -> str:
    """Read document n."""
    return f"doc {n} says " + "words " * 60


def _turn_tokens() -> int:
    """One turn as the server counts it: the model's tool call and its output."""
    call = tool_call("c10", "read", '{"n": 10}')
    output = {"role": "tool", "tool_call_id": "c10", "content": "doc 10 says " + "words " * 60}
    return count_message(call) + count_message(output)


def _define(app: Cairn, server: SimulatedModelServer, seen: list[int]) -> Any:
    model = sdk_model(server)

    def own(data: CallModelData[Any]) -> ModelInputData:
        """The caller's own filter: runs after cairn's, on what it gives."""
        seen.append(len(data.model_data.input))
        return data.model_data

    @app.task(name="reader")
    async def reader(ctx: Context) -> str:
        session = CairnSession(
            "main",
            ctx=ctx,
            threshold=THRESHOLD,
            keep_tail=200,
            summarizer=ExtractiveSummarizer(max_tokens=100),
        )
        agent = Agent(name="reader", instructions=INSTRUCTIONS, model=model, tools=[read])
        config = RunConfig(call_model_input_filter=own)
        result = await run(
            ctx,
            agent,
            "Read them all.",
            session=session,
            max_turns=40,
            run_config=config,
            compact_in_run=True,
        )
        return str(result.final_output)

    return reader


def _script() -> Scripted:
    replies = [tool_call(f"c{i}", "read", f'{{"n": {i}}}') for i in range(CALLS - 1)]
    return Scripted([*replies, "All read."])


def _prompts(server: SimulatedModelServer) -> list[int]:
    return [count_messages(body["messages"]) for body in server.bodies]


def test_the_sessions_threshold_bounds_every_request_of_one_run(tmp_path: Path) -> None:
    """18 model calls in one run: without compaction the last prompt would hold
    all 17 turns; every request the server receives stays within the session's
    threshold plus one turn (the instructions included), the session compacted
    several times (entries of the task), and the caller's own input filter saw
    every call, with the shortened input."""
    seen: list[int] = []
    with SimulatedModelServer(_script()) as server:
        app = Cairn(f"sqlite:///{tmp_path / 'a.db'}", clock=FakeClock())
        assert app.run(_define(app, server, seen), task_id="r") == "All read."
        compactions = [
            call for call in admin(app.store).recorded_calls(task_id="r") if call.kind == "conv"
        ]
        app.close()
        prompts = _prompts(server)
    assert len(prompts) == CALLS
    assert max(prompts) <= THRESHOLD + _turn_tokens()
    assert len(compactions) >= 3
    assert len(seen) == CALLS
    assert max(seen) < 2 * CALLS - 1  # shortened before it saw it
    # The bound means something: the last request's whole history is far above it.
    assert (CALLS - 1) * _turn_tokens() > 2 * (THRESHOLD + _turn_tokens())


@pytest.mark.parametrize("nth", [7, 12])
def test_a_run_resumed_after_a_crash_sends_what_an_unbroken_one_sends(
    tmp_path: Path, nth: int
) -> None:
    """Killed right after its nth model call is recorded (past compactions), the
    resumed task replays the recorded calls without sending them and goes on:
    the requests of both processes together are those of a run never killed,
    in the same order, each within the bound, none sent twice."""
    with SimulatedModelServer(_script()) as clean:
        app = Cairn(f"sqlite:///{tmp_path / 'clean.db'}", clock=FakeClock())
        app.run(_define(app, clean, []), task_id="r")
        app.close()
        unbroken = clean.bodies
    url = f"sqlite:///{tmp_path / 'crash.db'}"
    clock = FakeClock()
    with SimulatedModelServer(_script()) as server:
        app = Cairn(url, clock=clock)
        set_fault_hook(app, crash_at("after_llm", nth))
        with pytest.raises(Crash), app:
            app.run(_define(app, server, []), task_id="r")
        with resume(url, clock) as other:
            assert other.run(_define(other, server, []), task_id="r") == "All read."
        assert server.repeats == 0
        assert server.bodies == unbroken
        assert max(_prompts(server)) <= THRESHOLD + _turn_tokens()
