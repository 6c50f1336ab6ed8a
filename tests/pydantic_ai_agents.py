"""What the Pydantic AI integration's tests share: the agent's model on a
simulated server, a scripted model that delegates, and tools that count their calls."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import httpx2
from openai import AsyncOpenAI, DefaultAsyncHttpxClient
from pydantic import TypeAdapter
from pydantic_ai import Agent, RunContext
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.usage import RunUsage

from cairn import Cairn, Context, TaskDef
from cairn.agent.messages import text_of
from cairn.agent.simulate import SimulatedModelServer
from cairn.integrations.pydantic_ai import CairnDurability
from tests.agent_server import API_KEY

DELEGATE_PROMPT = "Summarize in one line:"
USAGE: TypeAdapter[RunUsage] = TypeAdapter(RunUsage)


def chat_model(server: SimulatedModelServer) -> OpenAIChatModel:
    """Pydantic AI's Chat Completions model on ``server``, over HTTP (no SDK
    retries; no kept-alive connections, which would outlive each task's event loop)."""
    http = DefaultAsyncHttpxClient(limits=httpx2.Limits(max_keepalive_connections=0))
    client = AsyncOpenAI(base_url=server.base_url, api_key=API_KEY, max_retries=0, http_client=http)
    return OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=client))


def tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """An assistant message making one tool call."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


class Delegating:
    """The model: for the lead agent, one ``summarize`` call per note (``n`` 0,
    1, 2...) and then the answer; for the delegate a tool asks, a one-line
    summary. Decides from the request alone, so a request sent twice is a repeat."""

    def __init__(self, notes: int, tool: str = "summarize") -> None:
        self.notes = notes
        self.tool = tool

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        messages: Sequence[dict[str, Any]] = request["messages"]
        text = " ".join(text_of(m) for m in messages)
        if DELEGATE_PROMPT in text:
            return {"role": "assistant", "content": f"summary of {text.split(':')[-1].strip()}"}
        done = sum(1 for m in messages if m.get("role") == "tool")
        if done >= self.notes:
            return {"role": "assistant", "content": f"Summarized {self.notes} notes."}
        return tool_call(f"call_{done}", self.tool, {"n": done})


class Counted:
    """The lead agent with a ``summarize`` tool that delegates to a plain agent
    with ``usage=ctx.usage``, counting its calls here (never from cairn's record)."""

    def __init__(self, server: SimulatedModelServer, **durability: Any) -> None:
        self.calls: list[int] = []
        model = chat_model(server)
        self.delegate = Agent(model, name="summarizer")
        self.agent = Agent(
            model,
            name="lead",
            instructions="Summarize each note.",
            capabilities=[CairnDurability(**durability)],
        )
        calls = self.calls
        delegate = self.delegate

        @self.agent.tool
        async def summarize(ctx: RunContext[Any], n: int) -> str:
            """Summarize note ``n`` (by asking another agent)."""
            calls.append(n)
            result = await delegate.run(f"{DELEGATE_PROMPT} note {n}", usage=ctx.usage)
            return result.output


def lead_task(app: Cairn, counted: Counted) -> TaskDef[..., Any]:
    """A task running ``counted.agent``: its output and its run's usage (JSON)."""

    @app.task(name="lead")
    async def lead(ctx: Context, goal: str) -> dict[str, Any]:
        result = await counted.agent.run(goal)
        return {"output": result.output, "usage": USAGE.dump_python(result.usage, mode="json")}

    return lead
