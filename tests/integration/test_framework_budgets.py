"""The integrations' model calls are metered like ``ctx.llm``'s: an OpenAI Agents
SDK run and a Pydantic AI agent, on the simulated model server, under a batch
budget too small for one call (each reserves its input plus the default reply
allowance, ``cairn.agent.metering.DEFAULT_OUTPUT``): the task parks before any
request is sent, and after a raise it completes with a token spend equal to the
server's own count."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agents import Agent
from pydantic_ai import Agent as PydanticAgent

from cairn import Budget, Cairn, Context
from cairn.admin.budgets import budget_scope, budget_view, raise_budget
from cairn.agent.simulate import SimulatedModelServer
from cairn.integrations.openai_agents import run
from cairn.integrations.pydantic_ai import CairnDurability
from cairn.store import admin
from tests.agent_server import Scripted
from tests.agents_sdk import sdk_model
from tests.pydantic_ai_agents import chat_model

ANSWER = "Nothing to add."


def park_then_raise(app: Cairn, task: Any, server: SimulatedModelServer) -> tuple[Any, Any]:
    """Run batch "b" under Budget(tokens=500), then raise it and run it again:
    (the first report with the server's count then, the budget at the end)."""
    first = app.run_batch("b", task, [{}], progress=False, budget=Budget(tokens=500))
    sent = server.requests
    raise_budget(admin(app.store), budget_scope("b"), app.clock.now(), tokens=100_000)
    second = app.run_batch("b", task, [], progress=False)
    assert second.counts == {"completed": 1}
    return (first.counts, sent), budget_view(admin(app.store), budget_scope("b"))


def test_an_agents_sdk_run_parks_on_a_budget_and_goes_on_after_a_raise(tmp_path: Path) -> None:
    """Runner.run's model call counts against the batch budget: parked with no
    request sent, then completed, its spend the server's tokens."""
    with SimulatedModelServer(Scripted([ANSWER])) as server:
        app = Cairn(f"sqlite:///{tmp_path / 'cairn.db'}")
        model = sdk_model(server)

        @app.task(name="agent")
        async def agent_task(ctx: Context) -> str:
            result = await run(ctx, Agent(name="a", instructions="Be brief.", model=model), "go")
            return str(result.final_output)

        with app:
            (counts, sent), view = park_then_raise(app, agent_task, server)
    assert (counts, sent) == ({"waiting": 1}, 0)
    assert server.requests == 1
    assert view.spent_tokens == server.prompt_tokens + server.completion_tokens


def test_a_pydantic_ai_agent_parks_on_a_budget_and_goes_on_after_a_raise(
    tmp_path: Path,
) -> None:
    """A Pydantic AI model request counts against the batch budget the same way."""
    with SimulatedModelServer(Scripted([ANSWER])) as server:
        app = Cairn(f"sqlite:///{tmp_path / 'cairn.db'}")
        agent = PydanticAgent(chat_model(server), name="p", capabilities=[CairnDurability()])

        @app.task(name="agent")
        async def agent_task(ctx: Context) -> str:
            return str((await agent.run("go")).output)

        with app:
            (counts, sent), view = park_then_raise(app, agent_task, server)
    assert (counts, sent) == ({"waiting": 1}, 0)
    assert server.requests == 1
    assert view.spent_tokens == server.prompt_tokens + server.completion_tokens
