"""A streamed model call cut by SIGKILL is asked again once on the next run, and only then.

The agent runs in a subprocess against the simulated model server, which runs
in this test process and so counts every request across the kills. The agent
makes two streamed ``ctx.llm`` calls (a plan, then a report) and prints every
chunk it is handed. It is killed while the report is streaming: by itself,
after its k-th chunk, or from outside while the server holds the stream open.
The partial reply is never recorded: the next run replays the plan (its text as
one chunk, no request), sends the report's request again, exactly once, and
finishes; a run after that sends nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cairn.agent.simulate import SimulatedModelServer
from cairn.store import open_store
from tests.agent_server import Scripted, model_server

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

PLAN = "First read the ledger, then count the late entries."
REPORT = "The ledger balances: forty two entries, none of them late."
PLAN_WORDS = len(PLAN.split())
REPORT_WORDS = REPORT.replace(" ", "| ").split("|")
TIMEOUT = 60

# The child: a two-call streamed agent; it prints each chunk (a JSON line) and
# SIGKILLs itself on its kill_after-th chunk, once (a marker file says it did).
CHILD = """
import json, os, signal, sys
import anthropic, openai
from cairn import Cairn, Context
from cairn.agent import user

store, api, base_url, kill_after, marker = sys.argv[1:6]
app = Cairn(f"sqlite:///{store}")
if api == "openai":
    client = openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
else:
    client = anthropic.Anthropic(base_url=base_url, api_key="sk-test", max_retries=0)
seen = [0]

def on_chunk(text):
    print("CHUNK " + json.dumps(text), flush=True)
    seen[0] += 1
    if seen[0] == int(kill_after):
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        os.kill(os.getpid(), signal.SIGKILL)

@app.task(name="brief")
def brief(ctx: Context) -> str:
    conv = ctx.conversation("main", system="Be brief.", client=client)
    conv.append(user("Plan the audit."))
    plan = ctx.llm(conv, model="gpt-4o-mini", on_chunk=on_chunk)
    conv.append(user("Now report."))
    report = ctx.llm(conv, model="gpt-4o-mini", on_chunk=on_chunk)
    return report.content

with app:
    print("RESULT " + json.dumps(app.run(brief, task_id="brief")), flush=True)
"""


def start(
    store: Path, server: SimulatedModelServer, api: str, kill_after: int = 0
) -> subprocess.Popen[str]:
    """The agent in a subprocess, on ``store`` and the test's server."""
    base_url = server.base_url if api == "openai" else server.anthropic_base_url
    marker = store.with_suffix(".killed")
    command = [sys.executable, "-c", CHILD, str(store), api, base_url, str(kill_after), str(marker)]
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def finish(process: subprocess.Popen[str]) -> tuple[int, list[str], Any, str]:
    """Its exit code, the chunks it printed, its result (None if none) and stderr."""
    stdout, stderr = process.communicate(timeout=TIMEOUT)
    return (process.returncode, *parse(stdout.splitlines()), stderr)


def parse(lines: list[str]) -> tuple[list[str], Any]:
    chunks = [json.loads(line[6:]) for line in lines if line.startswith("CHUNK ")]
    results = [json.loads(line[7:]) for line in lines if line.startswith("RESULT ")]
    return chunks, (results[0] if results else None)


def stored_replies(store: Path) -> list[str]:
    """The assistant messages the conversation holds."""
    opened = open_store(str(store))
    try:
        rows = opened.load_messages("brief", "main", 0, 100)
        calls = [s for s in opened.load_history("brief").values() if s.kind == "llm"]
    finally:
        opened.close()
    assert len(calls) == 2
    return [json.loads(r.content)["content"] for r in rows if r.role == "assistant"]


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_killed_by_itself_mid_stream_the_call_is_sent_again_exactly_once(
    tmp_path: Path, api: str
) -> None:
    """SIGKILLed on its third chunk of the report, the agent had sent two requests
    and recorded the plan only. The second run replays the plan (one chunk, no
    request), sends the report's request once more, and finishes with the whole
    report, streamed from its start; a third run sends nothing. The store holds
    the two whole replies, nothing partial."""
    store = tmp_path / "agent.db"
    with model_server(Scripted([PLAN, REPORT])) as server:
        code, chunks, result, stderr = finish(start(store, server, api, PLAN_WORDS + 3))
        assert code == -signal.SIGKILL, stderr
        assert result is None
        assert chunks[PLAN_WORDS:] == REPORT_WORDS[:3]
        assert (server.requests, server.streams) == (2, 2)

        code, chunks, result, stderr = finish(start(store, server, api, PLAN_WORDS + 3))
        assert code == 0, stderr
        assert chunks == [PLAN, *REPORT_WORDS]
        assert result == REPORT
        assert server.requests == 3
        assert server.bodies[2] == server.bodies[1]  # the same request, asked again

        code, chunks, result, stderr = finish(start(store, server, api))
        assert code == 0, stderr
        assert result == REPORT
        assert server.requests == 3
    assert stored_replies(store) == [PLAN, REPORT]


def test_killed_from_outside_while_the_server_holds_the_stream(tmp_path: Path) -> None:
    """The server stops the plan's stream after a few events and the test, once
    the agent has printed those chunks, SIGKILLs it with the stream still open:
    nothing was recorded. The next run sends the plan's request again, exactly
    once, then the report's, and finishes; a run after that sends nothing."""
    store = tmp_path / "agent.db"
    held_after = 4  # the role event, then three words
    with model_server(Scripted([PLAN, PLAN, REPORT])) as server:
        hold = server.hold_next(after=held_after)
        first = start(store, server, "openai")
        assert first.stdout is not None
        lines = [first.stdout.readline() for _ in range(held_after - 1)]
        assert hold.reached.wait(TIMEOUT)
        os.kill(first.pid, signal.SIGKILL)
        code, _, _, stderr = finish(first)
        hold.release()
        assert code == -signal.SIGKILL, stderr
        chunks, _ = parse(lines)
        assert chunks == PLAN.replace(" ", "| ").split("|")[: held_after - 1]
        assert server.requests == 1

        code, chunks, result, stderr = finish(start(store, server, "openai"))
        assert code == 0, stderr
        assert chunks == [*PLAN.replace(" ", "| ").split("|"), *REPORT_WORDS]
        assert result == REPORT
        assert server.requests == 3
        assert server.bodies[1] == server.bodies[0]  # the same request, asked again

        code, _, result, stderr = finish(start(store, server, "openai"))
        assert (code, result) == (0, REPORT), stderr
        assert server.requests == 3
    assert stored_replies(store) == [PLAN, REPORT]
