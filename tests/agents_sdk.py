"""What the Agents SDK integration's tests share: a model on the simulated
server, through the SDK's own Chat Completions model, with tracing export off
(no network), and items of every kind a session holds."""

from __future__ import annotations

from typing import Any

from agents import OpenAIChatCompletionsModel, set_tracing_disabled
from openai import AsyncOpenAI

from cairn.agent.simulate import SimulatedModelServer
from tests.agent_server import API_KEY

set_tracing_disabled(True)

MODEL = "gpt-4o-mini"

# One of each kind of item the SDK saves in a session, as it saves them.
ITEMS: list[Any] = [
    {"role": "user", "content": "Read doc-01 and doc-02."},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "plan"}]},
    {"type": "function_call", "call_id": "c1", "name": "read", "arguments": '{"n": 1}'},
    {"type": "function_call", "call_id": "c2", "name": "read", "arguments": '{"n": 2}'},
    {"type": "function_call_output", "call_id": "c1", "output": "doc-01 says one"},
    {"type": "function_call_output", "call_id": "c2", "output": "doc-02 says two"},
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Both read.", "annotations": []}],
    },
]


def sdk_model(server: SimulatedModelServer) -> OpenAIChatCompletionsModel:
    """The SDK's Chat Completions model on ``server`` (no client retries: tests
    count requests)."""
    client = AsyncOpenAI(base_url=server.base_url, api_key=API_KEY, max_retries=0)
    return OpenAIChatCompletionsModel(model=MODEL, openai_client=client)


def tool_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """An assistant message (chat shape) that calls one tool."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        ],
    }
