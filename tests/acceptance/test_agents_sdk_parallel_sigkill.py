"""Agents SDK tools run side by side (``parallel_tools=True``), SIGKILLed between them.

One response calls two tools at once: ``file_report``, a ``once_tool`` that
files a report in a ledger (a file of the test's own, the outside system), and
``read_slowly``, which waits until the first run is being killed (the kill's
marker file) and then notes a read in another file of the test's. The agent
runs in a subprocess against the simulated model server in this test process,
which counts every request. It is SIGKILLed once the report's filing is
recorded, ``read_slowly`` still waiting:
the run after that must not file the report again, must run ``read_slowly``
(its call was never recorded) and send no request twice.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cairn.agent.messages import text_of
from cairn.agent.simulate import SimulatedModelServer
from tests.agent_server import model_server
from tests.crashes import finish_child, start_child

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

TIMEOUT = 90
ANSWER = "Filed, and read."

# The child: the agent, its two tools counting themselves in the test's files,
# and a fault hook that SIGKILLs it when the report's filing is recorded
# (after_record of ctx.once), once (a marker file says it did).
CHILD = """
import asyncio, json, os, sys
from agents import Agent, OpenAIChatCompletionsModel, function_tool, set_tracing_disabled
from openai import AsyncOpenAI
from cairn import Cairn, Context
from cairn.integrations.openai_agents import once_tool, operation_key, run
from cairn.testing import set_fault_hook
from tests.crashes import sigkill_at

store, base_url, ledger, reads, point, marker = sys.argv[1:7]
set_tracing_disabled(True)
app = Cairn(f"sqlite:///{store}")


def filed(key):
    if not os.path.exists(ledger):
        return None
    for line in open(ledger):
        if json.loads(line)["key"] == key:
            return "filed"
    return None


@function_tool
def file_report(report: str) -> str:
    \"\"\"File the report.\"\"\"
    with open(ledger, "a") as out:
        out.write(json.dumps({"key": operation_key(), "report": report}) + "\\n")
    return "filed"


@function_tool
async def read_slowly(name: str) -> str:
    \"\"\"Read a document (it waits for the kill's marker: in flight when the
    first run is killed, at once on the rerun).\"\"\"
    while not os.path.exists(marker):
        await asyncio.sleep(0.01)  # real-sleep-ok: waits for the other tool, not for time
    with open(reads, "a") as out:
        out.write(name + "\\n")
    return f"{name} read"


client = AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
model = OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=client)
agent = Agent(name="pair", instructions="File, and read.", model=model,
              tools=[once_tool(file_report, reconcile=filed), read_slowly])


@app.task(name="pair")
async def pair(ctx: Context) -> str:
    return str((await run(ctx, agent, "Go.", parallel_tools=True)).final_output)


set_fault_hook(app, sigkill_at(point, 1, marker))
with app:
    print(app.run(pair, task_id="pair"))
"""


def model(request: dict[str, Any]) -> dict[str, Any]:
    """Calls both tools in one response; answers once both results are in."""
    if any(m.get("role") == "tool" for m in request["messages"]):
        done = " ".join(text_of(m) for m in request["messages"] if m.get("role") == "tool")
        return {"role": "assistant", "content": f"{ANSWER} ({done})"}
    calls = [
        ("c1", "file_report", {"report": "all well"}),
        ("c2", "read_slowly", {"name": "doc-01"}),
    ]
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in calls
        ],
    }


def start(root: Path, server: SimulatedModelServer, point: str) -> subprocess.Popen[str]:
    """The agent in a subprocess, on the test's files and server."""
    store, ledger, reads = (str(root / name) for name in ("agent.db", "ledger.jsonl", "reads.txt"))
    return start_child(CHILD, store, server.base_url, ledger, reads, point, str(root / "killed"))


def finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    return finish_child(process, TIMEOUT)


def test_killed_between_two_parallel_tools_it_files_once_and_reads_once(tmp_path: Path) -> None:
    """SIGKILLed after the once-tool's filing was recorded, the other tool of
    the same response still waiting: the rerun replays the filing (the ledger
    holds one report), runs the unrecorded read once, sends the final request
    once, and answers with both results."""
    with model_server(model) as server:
        code, _, err = finish(start(tmp_path, server, "after_record"))
        assert code == -signal.SIGKILL, err
        assert server.requests == 1
        assert not (tmp_path / "reads.txt").exists()
        code, out, err = finish(start(tmp_path, server, "-"))
        assert code == 0, err
        assert (server.requests, server.repeats) == (2, 0)
    assert out == f"{ANSWER} (filed doc-01 read)"
    ledger = (tmp_path / "ledger.jsonl").read_text().splitlines()
    assert [json.loads(line)["report"] for line in ledger] == ["all well"]
    assert (tmp_path / "reads.txt").read_text().split() == ["doc-01"]
