"""CairnDurability: a Pydantic AI agent inside a cairn task, every call recorded.

Crashes are in-process (a fault hook raising ``Crash``, a restarted app on the
same store); the model is Pydantic AI's Chat Completions model over HTTP on the
simulated server, which counts requests. The SIGKILL proof is
tests/acceptance/test_pydantic_ai_sigkill.py.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext

from cairn import Cairn, Context, TaskDef, TaskFailed
from cairn.agent.costs import cost_report
from cairn.agent.simulate import SimulatedModelServer
from cairn.clock import FakeClock
from cairn.errors import ConfigurationError
from cairn.integrations.pydantic_ai import CairnDurability, operation_key
from cairn.store import admin
from cairn.testing import set_fault_hook
from tests.agent_server import Crash, Scripted, crash_at, resume
from tests.pydantic_ai_agents import (
    DELEGATE_PROMPT,
    Counted,
    Delegating,
    chat_model,
    lead_task,
    tool_call,
)

NOTES = 3
ANSWER = f"Summarized {NOTES} notes."


def clean_run(tmp_path: Path) -> dict[str, Any]:
    """What a run that was never killed returns (its own server and store)."""
    with SimulatedModelServer(Delegating(NOTES)) as server:
        counted = Counted(server)
        with Cairn(f"sqlite:///{tmp_path / 'clean.db'}", clock=FakeClock()) as app:
            result: dict[str, Any] = app.run(lead_task(app, counted), task_id="t", goal="go")
    return result


@pytest.mark.parametrize(("point", "nth"), [("after_llm", 2), ("after_step", 2)])
def test_a_resumed_run_repeats_nothing_and_its_usage_is_the_uncrashed_runs(
    store_url: str, clock: FakeClock, tmp_path: Path, point: str, nth: int
) -> None:
    """Crashed after a recorded model response or a recorded tool call (a tool
    that delegates to another agent with usage=ctx.usage), the run resumes in a
    new app: the server gets each request once, the tool runs once per call,
    the run's usage (the delegate's tokens included) equals an uncrashed run's,
    and cairn cost counts every model call's tokens once; on every backend."""
    clean = clean_run(tmp_path)
    with SimulatedModelServer(Delegating(NOTES)) as server:
        counted = Counted(server)
        app = Cairn(store_url, clock=clock)
        set_fault_hook(app, crash_at(point, nth))
        with pytest.raises(Crash), app:
            app.run(lead_task(app, counted), task_id="t", goal="go")
        sent = server.requests
        with resume(store_url, clock) as other:
            result = other.run(lead_task(other, counted), task_id="t", goal="go")
            report = cost_report(other.store)
        assert server.repeats == 0
        assert server.requests == clean["usage"]["requests"]
        assert sent < server.requests
    assert counted.calls == list(range(NOTES))
    assert result == clean
    assert result["output"] == ANSWER
    # The lead's requests (one per note, one answer), and one entry per delegation.
    assert report.total.calls == NOTES + 1 + NOTES
    assert report.total.usage.input_tokens == clean["usage"]["input_tokens"]
    assert report.total.usage.output_tokens == clean["usage"]["output_tokens"]


def test_a_resume_with_another_definition_is_refused_before_any_request(
    db_path: Path, clock: FakeClock
) -> None:
    """Crashed mid-run and resumed with a tool added, the task fails with
    AgentDefinitionChanged naming the tool and what to do, before any request;
    retried with the original definition it finishes without a repeat."""
    url = f"sqlite:///{db_path}"
    with SimulatedModelServer(Delegating(NOTES)) as server:
        counted = Counted(server)
        app = Cairn(url, clock=clock)
        set_fault_hook(app, crash_at("after_llm", 2))
        with pytest.raises(Crash), app:
            app.run(lead_task(app, counted), task_id="t", goal="go")
        sent = server.requests
        changed = Counted(server)

        @changed.agent.tool_plain
        def erase(n: int) -> str:
            """Erase note ``n``."""
            return "erased"

        current = [changed]

        with resume(url, clock) as other:

            @other.task(name="lead")
            async def lead(ctx: Context, goal: str) -> dict[str, Any]:
                return {"output": (await current[0].agent.run(goal)).output}

            with pytest.raises(TaskFailed) as failed:
                other.run(lead, task_id="t", goal="go")
            assert server.requests == sent
            assert admin(other.store).retry_task("t", clock.now())
            current[0] = counted
            result = other.run(lead, task_id="t", goal="go")
        assert (server.repeats, result["output"]) == (0, ANSWER)
    error = failed.value.error
    assert error["type"] == "cairn.errors.AgentDefinitionChanged"
    assert "Pydantic AI run" in error["message"]
    assert "tool 'erase' added" in error["message"]
    assert "restore that definition" in error["message"]


def test_a_run_outside_a_cairn_task_is_refused_with_what_to_do() -> None:
    """agent.run() outside any task raises ConfigurationError naming the agent
    and @app.task, before any request; with outside_task='run' it is an
    ordinary run; a misspelt outside_task is refused where it is given."""
    with SimulatedModelServer(Scripted(["hello"])) as server:
        model = chat_model(server)
        agent = Agent(model, name="greeter", capabilities=[CairnDurability()])
        with pytest.raises(ConfigurationError) as refused:
            asyncio.run(agent.run("hi"))
        assert server.requests == 0
        free = Agent(model, name="greeter", capabilities=[CairnDurability(outside_task="run")])
        assert asyncio.run(free.run("hi")).output == "hello"
    assert "'greeter'" in str(refused.value)
    assert "@app.task" in str(refused.value)
    with pytest.raises(ConfigurationError, match="'raise' or 'run'"):
        CairnDurability(outside_task="ignore")  # type: ignore[arg-type]


def test_a_once_tool_killed_after_acting_is_reconciled_not_called_again(
    db_path: Path, clock: FakeClock
) -> None:
    """A tool marked {'cairn': {'once': True, 'reconcile': ...}} goes through
    ctx.once: crashed after it acted and before that was recorded, the resumed
    run asks reconcile (which finds the effect by its key) and does not act again."""
    url = f"sqlite:///{db_path}"
    ledger: dict[str, str] = {}

    def reconcile(key: str) -> str | None:
        return ledger.get(key)

    def build(server: SimulatedModelServer) -> Agent[None, str]:
        agent = Agent(chat_model(server), name="filer", capabilities=[CairnDurability()])

        @agent.tool(metadata={"cairn": {"once": True, "reconcile": reconcile}})
        def file_report(ctx: RunContext[Any], n: int) -> str:
            """File report ``n``."""
            key = operation_key()
            assert key is not None
            ledger[key] = f"filed {n}"
            return f"filed {n}"

        return agent

    replies: list[str | dict[str, Any]] = [tool_call("call_0", "file_report", {"n": 0}), "Filed."]
    with SimulatedModelServer(Scripted(replies)) as server:
        agent = build(server)
        app = Cairn(url, clock=clock)
        set_fault_hook(app, crash_at("after_act", 1))
        with pytest.raises(Crash), app:
            app.run(filer_task(app, agent), task_id="t")
        assert len(ledger) == 1
        with resume(url, clock) as other:
            assert other.run(filer_task(other, agent), task_id="t") == "Filed."
            ops = [s for s in other.store.load_history("t").values() if s.kind == "op"]
    assert len(ledger) == 1
    assert len(ops) == 1
    assert json.loads(ops[0].output or "null") is not None


def filer_task(app: Cairn, agent: Agent[None, str]) -> TaskDef[..., Any]:
    @app.task(name="filer")
    async def filer(ctx: Context) -> str:
        return (await agent.run("file")).output

    return filer


def test_a_durable_delegate_inside_a_tool_runs_as_part_of_the_tools_entry(app: Cairn) -> None:
    """A delegate agent that has CairnDurability too, called from a tool, records
    nothing of its own (it would be an entry inside an entry): its requests are
    the tool's, counted in the llm entry after it and in the run's usage."""
    with SimulatedModelServer(Delegating(2)) as server:
        model = chat_model(server)
        delegate = Agent(model, name="summarizer", capabilities=[CairnDurability()])
        lead = Agent(model, name="lead", capabilities=[CairnDurability()])

        @lead.tool
        async def summarize(ctx: RunContext[Any], n: int) -> str:
            """Summarize note ``n``."""
            result = await delegate.run(f"{DELEGATE_PROMPT} note {n}", usage=ctx.usage)
            return result.output

        @app.task(name="nested")
        async def nested(ctx: Context) -> int:
            return (await lead.run("go")).usage.requests

        with app:
            requests = app.run(nested, task_id="t")
            names = [entry.name for entry in app.store.load_history("t").values()]
        assert requests == server.requests == 5  # three of the lead's, two of the delegate's
    tool = "lead__function_toolset__<agent>.call_tool:summarize"
    assert names == [
        "pydantic-ai agent lead",
        *(["pydantic-ai lead__model.request", tool, f"pydantic-ai requests of {tool}"] * 2),
        "pydantic-ai lead__model.request",
    ]
