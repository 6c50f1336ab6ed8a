"""``cairn conversation`` on an Agents SDK session that lives in a task.

The SDK's model calls are recorded as the task's ``llm`` entries (named
``agents-sdk model M``), not as reply rows of the session's conversation, so
the command reads them from the task's history: the stats say how many there
were and what they cost, and the table ends with them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from agents import Agent, function_tool
from typer.testing import CliRunner

from cairn import Cairn, Context
from cairn.agent.simulate import SimulatedModelServer
from cairn.cli import app as cli_app
from cairn.clock import FakeClock
from cairn.integrations.openai_agents import CairnSession, run
from tests.agent_server import Scripted
from tests.agents_sdk import MODEL, sdk_model, tool_call

CALLS = 18


@function_tool
def read(n: int) -> str:
    """Read document n."""
    return f"doc {n} says " + "words " * 20


def _record(path: Path) -> int:
    """An agent that reads 17 documents, one tool call a turn, then answers: 18
    model calls, its items kept in the task's session ``main``. Returns the
    prompt tokens the server counted over all of them."""
    replies = [tool_call(f"c{i}", "read", f'{{"n": {i}}}') for i in range(CALLS - 1)]
    with SimulatedModelServer(Scripted([*replies, "All read."])) as server:
        app = Cairn(f"sqlite:///{path}", clock=FakeClock())
        model = sdk_model(server)

        @app.task(name="reader")
        async def reader(ctx: Context) -> str:
            session = CairnSession("main", ctx=ctx)
            agent = Agent(name="reader", instructions="Read.", model=model, tools=[read])
            result = await run(ctx, agent, "Read them all.", session=session, max_turns=40)
            return str(result.final_output)

        assert app.run(reader, task_id="s") == "All read."
        app.close()
        assert server.requests == CALLS
        return server.prompt_tokens


def test_cairn_conversation_shows_an_agents_sdk_sessions_calls(tmp_path: Path) -> None:
    """After 18 SDK model calls, the session's conversation no longer says "no
    model call yet": the token counts are the provider's at each of the 18
    calls, the model calls line gives their number and the input tokens the
    server counted, the table ends with the latest ten calls (--calls: all 18,
    whose input tokens add up to the server's), and --json's stats say the same."""
    path = tmp_path / "sdk.db"
    counted = _record(path)
    cli = CliRunner()
    shown = cli.invoke(cli_app, ["conversation", "s", "--store", str(path)])
    assert shown.exit_code == 0, shown.output
    assert "no model call yet" not in shown.output
    assert f"the provider's at each of the {CALLS} model calls" in shown.output
    assert re.search(rf"model calls\s+{CALLS} \(input {counted:,} tokens", shown.output)
    listed = re.findall(rf"^\s*\d+\s+agents-sdk model {MODEL}\s+(\d+)\s", shown.output, re.M)
    latest = [int(n) for n in listed]
    assert len(latest) == 10
    assert f"--calls lists all {CALLS}" in shown.output
    every = cli.invoke(cli_app, ["conversation", "s", "--calls", "--store", str(path)])
    listed = re.findall(rf"^\s*\d+\s+agents-sdk model {MODEL}\s+(\d+)\s", every.output, re.M)
    assert len(listed) == CALLS
    assert sum(int(n) for n in listed) == counted
    assert [int(n) for n in listed[-10:]] == latest
    as_json = json.loads(
        cli.invoke(cli_app, ["conversation", "s", "--json", "--store", str(path)]).output
    )
    assert as_json["stats"]["model calls"].startswith(f"{CALLS} (input {counted:,}")
    assert len([c for c in as_json["calls"] if c["kind"] == "llm"]) == CALLS
