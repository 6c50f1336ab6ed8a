"""A LangGraph agent checkpointed by CairnSaver, SIGKILLed mid-run, resumes from
its checkpoint without repeating what had finished.

The agent is ``examples/langgraph_agent.py``: a model node calling an
OpenAI-compatible server, and a tool node that writes a line per run to the
test's own file. It runs in a subprocess; the server (``SimulatedModelServer``)
runs in this test process, so its counts of requests, and of requests identical
to an earlier one (a request sent twice), survive every kill. Nothing here is
counted from cairn's record.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cairn.agent.simulate import SimulatedModelServer
from tests.servers import wait_until

pytestmark = pytest.mark.acceptance

EXAMPLE = Path(__file__).parents[2] / "examples" / "langgraph_agent.py"
DOCS = 10
ANSWER = f"Read {DOCS} documents."
TIMEOUT = 60

# The child: the example, with a hook that SIGKILLs the process the nth time a
# node reaches a point (once per marker file: a rerun goes past it).
CHILD = """
import importlib.util, os, signal, sys

example, store, calls, docs, point, nth, marker = sys.argv[1:8]
spec = importlib.util.spec_from_file_location("langgraph_agent", example)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
reached = [0]

def hook(at):
    if at != point:
        return
    reached[0] += 1
    if reached[0] == int(nth):
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        os.kill(os.getpid(), signal.SIGKILL)

sys.exit(module.main(["--store", store, "--docs", docs, "--calls-file", calls], hook=hook))
"""


def start(
    tmp: Path, server: SimulatedModelServer, point: str = "-", nth: int = 0, store: str = ""
) -> subprocess.Popen[str]:
    """The example in a subprocess on the test's store, with the test's server
    as its OpenAI-compatible endpoint (through the environment, as a user would)."""
    env = {
        **os.environ,
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "sk-test",
    }
    marker = tmp / f"{point.replace(' ', '_')}.{nth}.killed"
    arguments = [str(EXAMPLE), store or f"sqlite:///{tmp / 'lg.db'}", str(tmp / "calls.txt")]
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, *arguments, str(DOCS), point, str(nth), str(marker)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
        env=env,
    )


def finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    stdout, stderr = process.communicate(timeout=TIMEOUT)
    return process.returncode, stdout, stderr


def tool_runs(tmp: Path) -> Counter[str]:
    """How often the tool ran per document, from the test's own file."""
    path = tmp / "calls.txt"
    return Counter(path.read_text().split()) if path.exists() else Counter()


def model() -> Any:
    spec = importlib.util.spec_from_file_location("langgraph_agent_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SimulatedReader(DOCS)


def killed(process: subprocess.Popen[str]) -> None:
    code, _, stderr = finish(process)
    assert code == -signal.SIGKILL, stderr


def test_killed_between_steps_it_repeats_nothing_that_finished(
    tmp_path: Path, store_url: str
) -> None:
    """SIGKILLed as the 4th model step starts, then as the 6th tool step starts
    (before its effect), then after the 2nd model request of a run returned but
    before its step finished: the agent finishes on the fourth run with the
    uninterrupted answer. At the server, no request of a finished step was sent
    twice: the one repeat is the request whose step the last kill cut short. In
    the test's file, every document was read exactly once. On both stores."""
    store = store_url
    with SimulatedModelServer(model()) as server:
        killed(start(tmp_path, server, "model", 4, store))
        assert server.requests == 3
        assert tool_runs(tmp_path) == Counter({f"doc-{i:02d}": 1 for i in range(3)})
        killed(start(tmp_path, server, "tool", 6, store))
        assert server.requests == 3 + 6
        assert server.repeats == 0
        assert sum(tool_runs(tmp_path).values()) == 3 + 5
        killed(start(tmp_path, server, "model returned", 2, store))
        assert server.requests == 9 + 2
        assert server.repeats == 0
        code, stdout, stderr = finish(start(tmp_path, server, store=store))
        assert code == 0, stderr
        assert stdout.strip() == ANSWER
        assert server.repeats == 1  # the cut-short step's request, sent again
        assert server.requests == DOCS + 1 + 1
        assert tool_runs(tmp_path) == Counter({f"doc-{i:02d}": 1 for i in range(DOCS)})


@pytest.mark.skip(
    reason="known defect (docs/langgraph.md, 'After a crash'): under a loaded suite a "
    "random kill twice left a thread that ended on a tool's result; not yet reproduced alone"
)
def test_killed_at_random_moments_each_kill_costs_at_most_one_step(tmp_path: Path) -> None:
    """SIGKILLed from outside whenever the server has seen a few more requests (so
    during a request, a tool, or a checkpoint write), the agent still finishes
    with the same answer; each kill repeated at most the step in flight: one
    request, or one tool run."""
    kills = 0
    with SimulatedModelServer(model()) as server:
        for target in (2, 5, 8):
            process = start(tmp_path, server)
            # An earlier round may have left less work than this target: a run
            # that finishes on its own first is a round without a kill.
            settled = wait_until(
                lambda: server.requests >= target or process.poll() is not None,  # noqa: B023
                TIMEOUT,
            )
            process.send_signal(signal.SIGKILL)  # a no-op once the run has exited
            code, _, stderr = finish(process)
            assert settled, stderr
            assert code in (0, -signal.SIGKILL), stderr
            kills += code == -signal.SIGKILL
        code, stdout, stderr = finish(start(tmp_path, server))
        assert code == 0, stderr
        assert stdout.strip() == ANSWER
        runs = tool_runs(tmp_path)
        assert set(runs) == {f"doc-{i:02d}" for i in range(DOCS)}
        assert server.repeats + sum(runs.values()) - DOCS <= kills
