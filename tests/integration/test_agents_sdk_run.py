"""run(): an Agents SDK Runner.run inside a cairn task, every call recorded.

Crashes are in-process (a fault hook raising ``Crash``, a restarted app on the
same store); the model is the SDK's Chat Completions model on the simulated
server, which counts requests. The SIGKILL proof is
tests/acceptance/test_agents_sdk_sigkill.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Model, ModelProvider, RunConfig, function_tool

from cairn import Cairn, Context, TaskDef, TaskFailed
from cairn.agent import iter_history
from cairn.agent.costs import cost_report
from cairn.agent.simulate import SimulatedModelServer
from cairn.clock import FakeClock
from cairn.integrations.openai_agents import CairnSession, once_tool, run, run_sync
from cairn.testing import set_fault_hook
from tests.agent_server import Crash, Scripted, crash_at, resume
from tests.agents_sdk import sdk_model, tool_call

ANSWER = "All three are noted."


def script() -> Scripted:
    """Three turns of one tool call each, then the answer."""
    calls = [tool_call(f"call_{n}", "note", json.dumps({"n": n})) for n in range(3)]
    return Scripted([*calls, ANSWER])


class Notes:
    """A tool that counts its calls (in the test, never from cairn's record)."""

    def __init__(self) -> None:
        self.calls: list[int] = []

        @function_tool
        def note(n: int) -> str:
            """Note a number."""
            self.calls.append(n)
            return f"noted {n}"

        self.tool = note


def task_of(app: Cairn, agent: Callable[[], Agent[Any]]) -> TaskDef[..., Any]:
    @app.task(name="agent")
    async def agent_task(ctx: Context, goal: str) -> str:
        result = await run(ctx, agent(), goal)
        return str(result.final_output)

    return agent_task


def test_a_resumed_run_sends_no_recorded_request_and_calls_no_recorded_tool(
    store_url: str, clock: FakeClock
) -> None:
    """Crashed after its second recorded response, the run resumes in a new
    app: the server gets only the requests not recorded yet (four in all, none
    twice), the tool runs once per call, the answer is the uninterrupted one,
    and cairn cost's tokens are the ones the server counted; on every backend."""
    notes = Notes()
    url = store_url
    with SimulatedModelServer(script()) as server:
        model = sdk_model(server)
        app = Cairn(url, clock=clock)
        set_fault_hook(app, crash_at("after_llm", 2))
        with pytest.raises(Crash), app:
            app.run(task_of(app, lambda: agent_of(model, notes)), task_id="t", goal="x")
        assert (server.requests, notes.calls) == (2, [0])
        with resume(url, clock) as other:
            answer = other.run(
                task_of(other, lambda: agent_of(model, notes)), task_id="t", goal="x"
            )
            report = cost_report(other.store)
        assert answer == ANSWER
        assert (server.requests, server.repeats) == (4, 0)
        counted = (server.prompt_tokens, server.completion_tokens)
    assert notes.calls == [0, 1, 2]
    assert report.total.calls == 4
    assert (report.total.usage.input_tokens, report.total.usage.output_tokens) == counted
    assert report.total.cost > 0


def agent_of(model: Any, notes: Notes, **changes: Any) -> Agent[Any]:
    options: dict[str, Any] = {
        "name": "noter",
        "instructions": "Note the numbers.",
        "model": model,
        "tools": [notes.tool],
    }
    return Agent(**{**options, **changes})


def test_the_tool_calls_of_one_response_are_recorded_in_its_order(app: Cairn) -> None:
    """A response calling three tools at once: their entries take positions in
    the order the response lists them, one after the other (the next starts
    when the previous is recorded)."""
    notes = Notes()
    calls = [
        {
            "id": f"c{n}",
            "type": "function",
            "function": {"name": "note", "arguments": f'{{"n": {n}}}'},
        }
        for n in (2, 0, 1)
    ]
    reply = {"role": "assistant", "content": None, "tool_calls": calls}
    with SimulatedModelServer(Scripted([reply, ANSWER])) as server:
        model = sdk_model(server)
        with app:
            assert app.run(task_of(app, lambda: agent_of(model, notes)), task_id="t", goal="x")
            history = app.store.load_history("t")
    assert notes.calls == [2, 0, 1]
    outputs = [json.loads(s.output or "null") for s in history.values() if s.kind == "step"]
    assert outputs == ["noted 2", "noted 0", "noted 1"]


def test_parallel_tools_run_side_by_side(app: Cairn) -> None:
    """With parallel_tools=True the tools of one response run together: the
    first waits for an event only the second sets, and the run still ends."""
    both = {"id": "a", "type": "function", "function": {"name": "wait", "arguments": "{}"}}
    other = {"id": "b", "type": "function", "function": {"name": "release", "arguments": "{}"}}
    reply = {"role": "assistant", "content": None, "tool_calls": [both, other]}
    released: list[asyncio.Event] = []

    @function_tool
    async def wait() -> str:
        """Wait for the other tool."""
        await released[0].wait()
        return "waited"

    @function_tool
    async def release() -> str:
        """Let the other tool go."""
        released[0].set()
        return "released"

    with SimulatedModelServer(Scripted([reply, ANSWER])) as server:
        agent = Agent(name="pair", model=sdk_model(server), tools=[wait, release])

        @app.task
        async def pair(ctx: Context) -> str:
            released.append(asyncio.Event())
            result = await run(ctx, agent, "go", parallel_tools=True)
            return str(result.final_output)

        with app:
            assert app.run(pair, task_id="p") == ANSWER


def test_a_once_tool_killed_after_acting_is_in_doubt_not_called_again(
    db_path: Path, clock: FakeClock
) -> None:
    """A once_tool crashed after it acted and before that was recorded is not
    called again on resume: without a reconcile function the task stops with
    InDoubtOperation; the tool ran once."""
    notes = Notes()
    once_tool(notes.tool)
    url = f"sqlite:///{db_path}"
    with SimulatedModelServer(script()) as server:
        model = sdk_model(server)
        app = Cairn(url, clock=clock)
        set_fault_hook(app, crash_at("after_act", 1))
        with pytest.raises(Crash), app:
            app.run(task_of(app, lambda: agent_of(model, notes)), task_id="t", goal="x")
        with resume(url, clock) as other, pytest.raises(TaskFailed) as failed:
            other.run(task_of(other, lambda: agent_of(model, notes)), task_id="t", goal="x")
    assert failed.value.error["type"] == "cairn.errors.InDoubtOperation"
    assert notes.calls == [0]


def test_a_session_in_the_task_replays_without_a_row_twice(db_path: Path, clock: FakeClock) -> None:
    """Two runs in one task on one CairnSession: the second's request carries
    the first's exchange; crashed inside the second and resumed, the session's
    rows are each written once and the server saw no request twice."""
    url = f"sqlite:///{db_path}"
    with SimulatedModelServer(Scripted(["Hello, Ada.", "You are Ada."])) as server:
        model = sdk_model(server)

        def chat_task(app: Cairn) -> TaskDef[..., Any]:
            @app.task(name="chat")
            async def chat(ctx: Context) -> str:
                session = CairnSession("main", ctx=ctx)
                agent = Agent(name="greeter", instructions="Be brief.", model=model)
                await run(ctx, agent, "My name is Ada.", session=session)
                result = await run(ctx, agent, "Who am I?", session=session)
                return str(result.final_output)

            return chat

        app = Cairn(url, clock=clock)
        set_fault_hook(app, crash_at("after_llm", 2))
        with pytest.raises(Crash), app:
            app.run(chat_task(app), task_id="c")
        with resume(url, clock) as other:
            assert other.run(chat_task(other), task_id="c") == "You are Ada."
            rows = list(iter_history(other.store, "c", "main"))
        assert (server.requests, server.repeats) == (2, 0)
        assert "My name is Ada." in str(server.bodies[1]["messages"])
    texts = [str(r.message.get("content")) for r in rows]
    assert [r.idx for r in rows] == list(range(4))
    assert texts[0] == "My name is Ada."
    assert "Hello, Ada." in texts[1]
    assert texts[2] == "Who am I?"
    assert "You are Ada." in texts[3]


def test_a_handoff_beside_a_tool_call_in_one_response_neither_blocks_nor_repeats(
    db_path: Path, clock: FakeClock
) -> None:
    """A response that calls a tool and hands off in one go: the handoff's call
    never reaches a tool, and the tool does not wait for it; the helper agent
    (cloned with its own calls recorded) answers, and after a crash at the
    helper's answer the resumed run replays the lot with nothing sent twice."""
    notes = Notes()
    both = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "h1",
                "type": "function",
                "function": {"name": "transfer_to_helper", "arguments": "{}"},
            },
            {"id": "n1", "type": "function", "function": {"name": "note", "arguments": '{"n": 7}'}},
        ],
    }
    url = f"sqlite:///{db_path}"
    with SimulatedModelServer(Scripted([both, "Helped."])) as server:
        model = sdk_model(server)

        def lead() -> Agent[Any]:
            helper = Agent(name="helper", instructions="Help.", model=model)
            return agent_of(model, notes, handoffs=[helper])

        app = Cairn(url, clock=clock)
        set_fault_hook(app, crash_at("after_llm", 2))
        with pytest.raises(Crash), app:
            app.run(task_of(app, lead), task_id="t", goal="x")
        with resume(url, clock) as other:
            assert other.run(task_of(other, lead), task_id="t", goal="x") == "Helped."
        assert (server.requests, server.repeats) == (2, 0)
    assert notes.calls == [7]


def test_run_sync_makes_a_plain_def_task_durable_too(db_path: Path, clock: FakeClock) -> None:
    """In a plain ``def`` task, run_sync crashed mid-run and resumed sends no
    recorded request again and calls no recorded tool again."""
    notes = Notes()
    url = f"sqlite:///{db_path}"
    with SimulatedModelServer(script()) as server:
        model = sdk_model(server)

        def sync_task(app: Cairn) -> TaskDef[..., Any]:
            @app.task(name="sync-agent")
            def agent_task(ctx: Context) -> str:
                return str(run_sync(ctx, agent_of(model, notes), "note 3").final_output)

            return agent_task

        app = Cairn(url, clock=clock)
        set_fault_hook(app, crash_at("after_step", 2))
        with pytest.raises(Crash), app:
            app.run(sync_task(app), task_id="s")
        with resume(url, clock) as other:
            assert other.run(sync_task(other), task_id="s") == ANSWER
        assert (server.requests, server.repeats) == (4, 0)
    assert notes.calls == [0, 1, 2]


class ServerProvider(ModelProvider):
    """A model provider that hands out the simulated server's model by any name."""

    def __init__(self, server: SimulatedModelServer) -> None:
        self.server = server
        self.asked: list[str | None] = []

    def get_model(self, model_name: str | None) -> Model:
        self.asked.append(model_name)
        return sdk_model(self.server)


def test_a_model_named_by_a_string_is_recorded_through_the_run_config_provider(
    app: Cairn,
) -> None:
    """An agent naming its model by a string gets it from the run config's
    provider, wrapped: the call is a recorded entry with its usage, and a rerun
    of the finished task sends nothing."""
    notes = Notes()
    with SimulatedModelServer(Scripted([ANSWER])) as server:
        provider = ServerProvider(server)

        @app.task
        async def named(ctx: Context) -> str:
            agent = agent_of("gpt-4o-mini", notes)
            result = await run(ctx, agent, "hi", run_config=RunConfig(model_provider=provider))
            return str(result.final_output)

        with app:
            assert app.run(named, task_id="n") == ANSWER
            assert app.run(named, task_id="n") == ANSWER
            calls = [s for s in app.store.load_history("n").values() if s.kind == "llm"]
        assert server.requests == 1
    assert provider.asked == ["gpt-4o-mini"]
    (call,) = calls
    assert call.name == "agents-sdk model gpt-4o-mini"
    assert json.loads(call.output or "{}")["usage"]["input_tokens"] > 0
