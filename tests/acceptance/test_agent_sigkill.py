"""A tool-using agent SIGKILLed mid-conversation resumes without paying twice.

The agent is ``examples/agent_tools.py``, run in a subprocess against the fake
OpenAI-compatible server of ``tests/agent_server.py``, which runs in this test
process and so counts every request across every kill. A request identical to
an earlier one is a call sent twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from cairn.agent._window import tool_pairs_intact
from cairn.agent.archive import iter_history, load_conversation
from cairn.agent.simulate import SimulatedModelServer
from cairn.store import open_store
from tests.agent_server import model_server
from tests.servers import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

EXAMPLE = Path(__file__).parents[2] / "examples" / "agent_tools.py"
DOCS = 24
TASK = "research/shelf"
REPORT = f"Read {DOCS} documents; sales by region are in the summary."
TIMEOUT = 60

# The child: the example's app on the test's server, with a fault hook that
# SIGKILLs the process the nth time it reaches a point (once: a marker file).
CHILD = """
import importlib.util, os, signal, sys
from cairn.testing import set_fault_hook

example, point, nth, marker, docs = sys.argv[1:6]
spec = importlib.util.spec_from_file_location("agent_tools", example)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
reached = [0]

def hook(at, task_id, seq, name):
    if at != point:
        return
    reached[0] += 1
    if reached[0] == int(nth):
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        os.kill(os.getpid(), signal.SIGKILL)

set_fault_hook(module.app, hook)
with module.app:
    print(module.app.run(module.research, task_id="research/shelf", topic="shelf",
                         docs=int(docs), threshold=1500, keep_tail=500))
"""


def start(
    store: Path, server: SimulatedModelServer, point: str = "-", nth: int = 0
) -> subprocess.Popen[str]:
    """The example in a subprocess: its store, and the test's server as its
    OpenAI-compatible endpoint (through the environment, as a user would)."""
    marker = store.with_suffix(f".{point}.{nth}.killed")
    env = {
        **os.environ,
        "CAIRN_STORE": f"sqlite:///{store}",
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "sk-test",
        "OPENAI_MAX_RETRIES": "0",
    }
    env.pop("ANTHROPIC_API_KEY", None)
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(EXAMPLE), point, str(nth), str(marker), str(DOCS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
        env=env,
    )


def finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    stdout, stderr = process.communicate(timeout=TIMEOUT)
    return process.returncode, stdout, stderr


def check_store(store: Path, server: SimulatedModelServer) -> None:
    """Every model call the store records was sent once; the conversation's rows
    are contiguous and its active context keeps tool calls with their results."""
    opened = open_store(str(store))
    try:
        calls = [s for s in opened.load_history(TASK).values() if s.kind == "llm"]
        rows = list(iter_history(opened, TASK, "main"))
        view = load_conversation(opened, TASK)
    finally:
        opened.close()
    assert [r.idx for r in rows] == list(range(len(rows)))
    assert view is not None
    assert tool_pairs_intact(view.messages[2:])
    assert sum(1 for r in rows if r.kind == "summary") >= 2
    assert len(calls) == DOCS + 2  # list, one read per document, finish
    assert server.requests >= len(calls)


def test_killed_after_recorded_calls_it_resends_none_of_them(tmp_path: Path) -> None:
    """SIGKILLed right after its 5th model call is recorded, then after 9 more
    live calls, the agent finishes on the third run: the server saw each call
    exactly once (no repeat at all), and the report is the uninterrupted one."""
    store = tmp_path / "agent.db"
    with model_server(_researcher()) as server:
        first = finish(start(store, server, "after_llm", 5))
        assert first[0] == -signal.SIGKILL, first[2]
        assert server.requests == 5
        second = finish(start(store, server, "after_llm", 9))
        assert second[0] == -signal.SIGKILL, second[2]
        assert server.requests == 14
        code, stdout, stderr = finish(start(store, server))
        assert code == 0, stderr
        assert stdout.strip() == REPORT
        assert server.repeats == 0
        assert server.requests == DOCS + 2
        check_store(store, server)


def test_killed_at_random_moments_it_repeats_at_most_the_call_in_flight(tmp_path: Path) -> None:
    """SIGKILLed from outside four times, whenever the server has seen a few more
    requests (so anywhere: before, during or after a call, a tool step or an
    append), the agent finishes with the same report; each kill can have cost at
    most the one request in flight when it landed."""
    store = tmp_path / "agent.db"
    kills = 0
    with model_server(_researcher()) as server:
        for target in (3, 9, 15, 21):
            process = start(store, server)
            reached = wait_until(_seen(server, target), TIMEOUT)
            os.kill(process.pid, signal.SIGKILL)
            code, _, stderr = finish(process)
            assert reached, stderr
            kills += code == -signal.SIGKILL
        code, stdout, stderr = finish(start(store, server))
        assert code == 0, stderr
        assert stdout.strip() == REPORT
        assert server.repeats <= kills
        check_store(store, server)
    report = {"kills": kills, "requests": server.requests, "repeats": server.repeats}
    sys.stdout.write(json.dumps(report) + "\n")


def _seen(server: SimulatedModelServer, count: int) -> Callable[[], bool]:
    return lambda: server.requests >= count


def _researcher() -> object:
    import importlib.util

    spec = importlib.util.spec_from_file_location("agent_tools_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SimulatedResearcher(DOCS)
