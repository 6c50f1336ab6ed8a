"""A provider's errors inside the agent frameworks' recorded model calls.

The OpenAI Agents SDK and Pydantic AI call the openai SDK themselves; cairn
records each call as an entry. Their errors are the SDK's (or the framework's,
chained to the SDK's), so each entry and the task record what cairn makes of
them, as for ``ctx.llm``: redacted (no key an error echoes reaches the store's
files), a 401 never retried, a 429 waited out for what the provider asked. The
model server is the simulated one on 127.0.0.1, counting every request.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from agents import Agent as SdkAgent
from agents import OpenAIChatCompletionsModel
from openai import AsyncOpenAI, DefaultAsyncHttpxClient
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from cairn import Cairn, Context, TaskDef, TaskFailed
from cairn.agent.provider_errors import REDACTED
from cairn.agent.simulate import SimulatedModelServer
from cairn.clock import FakeClock
from cairn.integrations.openai_agents import run
from cairn.integrations.pydantic_ai import CairnDurability
from tests.agent_server import Scripted
from tests.agents_sdk import MODEL

KEY = "local-proxy-key-7f3a9c0d21"  # no known key shape: redacted only by value
HEADER_SECRET = "gateway-secret-5e1b77aa90"  # a credential in a custom header
ANSWER = "All done."


def _client(server: SimulatedModelServer) -> AsyncOpenAI:
    # No kept-alive connections: they would outlive each task's event loop.
    http = DefaultAsyncHttpxClient(limits=httpx2.Limits(max_keepalive_connections=0))
    return AsyncOpenAI(
        base_url=server.base_url,
        api_key=KEY,
        max_retries=0,
        http_client=http,
        default_headers={"api-key": HEADER_SECRET},
    )


def agents_sdk_task(app: Cairn, server: SimulatedModelServer) -> TaskDef[..., Any]:
    model = OpenAIChatCompletionsModel(model=MODEL, openai_client=_client(server))
    agent = SdkAgent(name="asker", instructions="Answer.", model=model)

    @app.task(name="asker", retry=None)
    async def asker(ctx: Context) -> str:
        return str((await run(ctx, agent, "Say done.")).final_output)

    return asker


def pydantic_ai_task(app: Cairn, server: SimulatedModelServer) -> TaskDef[..., Any]:
    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(openai_client=_client(server)))
    agent = PydanticAgent(model, name="asker", capabilities=[CairnDurability()])

    @app.task(name="asker", retry=None)
    async def asker(ctx: Context) -> str:
        return str((await agent.run("Say done.")).output)

    return asker


FRAMEWORKS: dict[str, Callable[[Cairn, SimulatedModelServer], TaskDef[..., Any]]] = {
    "agents-sdk": agents_sdk_task,
    "pydantic-ai": pydantic_ai_task,
}


def _stored(root: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file())


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_a_401_echoing_the_keys_fails_once_and_stores_neither(
    tmp_path: Path, clock: FakeClock, framework: str
) -> None:
    """The server refuses with a 401 whose text echoes the client's key and the
    credential of its custom ``api-key`` header, inside nested JSON: one request
    (a 401 is never retried, whatever the policy), the task fails with cairn's
    Permanent, and neither secret is in the SQLite file or its WAL, while the
    redaction mark is."""
    app = Cairn(f"sqlite:///{tmp_path / 'cairn.db'}", clock=clock)
    echoed = f'{{"detail": {{"api_key": "{KEY}", "headers": {{"api-key": "{HEADER_SECRET}"}}}}}}'
    with SimulatedModelServer(Scripted([ANSWER])) as server:
        server.fail_next(5, 401, message=echoed)
        with pytest.raises(TaskFailed) as failed:
            app.run(FRAMEWORKS[framework](app, server), task_id="t")
        assert server.requests == 1
        stored = _stored(tmp_path)
        app.close()
    assert failed.value.error["type"] == "cairn.errors.Permanent"
    assert "AuthenticationError" in failed.value.error["message"]
    everything = stored + _stored(tmp_path)
    for secret in (KEY, HEADER_SECRET):
        assert secret.encode() not in everything, secret
    assert REDACTED.encode() in everything


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_a_429_is_waited_out_for_the_seconds_asked(
    app: Cairn, clock: FakeClock, framework: str
) -> None:
    """A 429 with Retry-After: 7 is waited out for 7 s (on the task's clock),
    without spending an attempt, and the request sent again succeeds: two
    requests in all, and the agent's answer."""
    with SimulatedModelServer(Scripted([ANSWER])) as server:
        server.fail_next(1, 429, headers={"Retry-After": "7"}, message="slow down")
        assert app.run(FRAMEWORKS[framework](app, server), task_id="t") == ANSWER
        assert server.requests == 2
    assert 7.0 in clock.slept
