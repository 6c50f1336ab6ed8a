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
import random
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cairn.agent.simulate import SimulatedModelServer
from cairn.integrations.langgraph import CairnSaver
from tests.acceptance.random_kills import POST_TOOL_RUN, ToolServer, kill_at_random, kill_plan, seed

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

EXAMPLE = Path(__file__).parents[2] / "examples" / "langgraph_agent.py"
DOCS = 10
ANSWER = f"Read {DOCS} documents."
# A hang guard, not a measure: a child run takes seconds, but minutes on a
# machine loaded by two suites and other work (seen: over 180 s at load 17).
TIMEOUT = 600

# The child: the example, with a hook that SIGKILLs the process the nth time a
# node reaches a point (once per marker file: a rerun goes past it). The point
# "checkpoint" is the saver's nth put, entered once the writes of the step it
# closes are stored: a step whose tasks all finished, killed before its
# checkpoint was written.
CHILD = """
import importlib.util, os, signal, sys, time

from cairn.integrations.langgraph import CairnSaver

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

put = CairnSaver.put

def put_then_maybe_die(self, config, checkpoint, metadata, new_versions):
    step = metadata.get("step", -1)
    if point == "checkpoint" and step >= 1 and reached[0] + 1 == int(nth):
        # The writes of the step this checkpoint closes are saved by other
        # threads; wait until they are stored (LangGraph runs the step's one
        # task, so one task's writes), then die before the checkpoint is.
        deadline = time.monotonic() + 60
        while not self.get_tuple(config).pending_writes and time.monotonic() < deadline:
            time.sleep(0.01)  # real-sleep-ok: a poll, bounded by the deadline
    if step >= 1:
        hook("checkpoint")
    return put(self, config, checkpoint, metadata, new_versions)

CairnSaver.put = put_then_maybe_die
sys.exit(module.main(["--store", store, "--docs", docs, "--calls-file", calls], hook=hook))
"""


# The child of the random-kill test: the example with its tool posting each run
# to the test's tool server (before it reads), and no kill of its own.
CHILD_POSTING = (
    POST_TOOL_RUN
    + """
import importlib.util, sys

example, store, calls, docs = sys.argv[1:5]
spec = importlib.util.spec_from_file_location("langgraph_agent", example)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
read_document = module.read_document

def posted(name):
    post_tool_run(name)
    return read_document(name)

module.read_document = posted
sys.exit(module.main(["--store", store, "--docs", docs, "--calls-file", calls]))
"""
)


def start(
    tmp: Path,
    server: SimulatedModelServer,
    point: str = "-",
    nth: int = 0,
    store: str = "",
    tools: ToolServer | None = None,
) -> subprocess.Popen[str]:
    """The example in a subprocess on the test's store, with the test's server
    as its OpenAI-compatible endpoint (through the environment, as a user would);
    with ``tools``, its tool runs posted there, and no kill point."""
    env = {
        **os.environ,
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "sk-test",
    }
    if tools is not None:
        env["CAIRN_TEST_TOOL_URL"] = tools.url
        arguments = [str(EXAMPLE), store or f"sqlite:///{tmp / 'lg.db'}", str(tmp / "calls.txt")]
        return subprocess.Popen(
            [sys.executable, "-c", CHILD_POSTING, *arguments, str(DOCS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).parents[2],
            env=env,
        )
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


def example() -> Any:
    spec = importlib.util.spec_from_file_location("langgraph_agent_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def model() -> Any:
    return example().SimulatedReader(DOCS)


def build_example(saver: CairnSaver) -> Any:
    """The example's graph on ``saver``, to read a thread's state (no model)."""
    return example().build(saver, client=None, model="unused")


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


def test_killed_after_a_steps_writes_before_its_checkpoint_it_resumes(tmp_path: Path) -> None:
    """SIGKILLed once a tool step's writes are stored and before its checkpoint is,
    then the same after a model step: LangGraph reports such a thread with no next
    node and a task that has writes (the shape that once made the example print a
    tool's result as its answer). The rerun applies those writes, runs nothing of
    the finished steps again (no request sent twice, every document read once) and
    finishes with the uninterrupted answer. On SQLite: what is tested is how the
    example reads LangGraph's state, the same on both stores (the test above
    runs the checkpointer on both)."""
    store_url = f"sqlite:///{tmp_path / 'lg.db'}"
    with SimulatedModelServer(model()) as server:
        # Puts from step 1 on: step 1 closes a model step, 2 a tool step (doc-00
        # read), 3 a model step, 4 a tool step (doc-01 read).
        killed(start(tmp_path, server, "checkpoint", 4, store_url))
        assert tool_runs(tmp_path) == Counter({"doc-00": 1, "doc-01": 1})
        assert stopped_between_steps(store_url) == "tools"
        # The rerun's 1st put is the stopped step's, its 2nd closes the model
        # step that asks for doc-02.
        killed(start(tmp_path, server, "checkpoint", 2, store_url))
        assert stopped_between_steps(store_url) == "model"
        assert server.requests == 3
        assert server.repeats == 0
        code, stdout, stderr = finish(start(tmp_path, server, store=store_url))
        assert code == 0, stderr
        assert stdout.strip() == ANSWER
        assert server.repeats == 0
        assert server.requests == DOCS + 1
        assert tool_runs(tmp_path) == Counter({f"doc-{i:02d}": 1 for i in range(DOCS)})


def stopped_between_steps(store: str) -> str:
    """The node of the thread's one finished task whose step has no checkpoint yet,
    checked to be what LangGraph reports for such a thread: no next node."""
    with CairnSaver(store) as saver:
        graph = build_example(saver)
        state = graph.get_state({"configurable": {"thread_id": "research/shelf"}})
    assert state.next == ()
    assert [bool(task.result) for task in state.tasks] == [True]
    return str(state.tasks[0].name)


@pytest.mark.slow
@pytest.mark.timeout(2400)  # a hang guard for five child runs under load
def test_killed_at_seeded_random_moments_each_kill_costs_at_most_one_step(
    tmp_path: Path, store_url: str
) -> None:
    """SIGKILLed four times at moments drawn from a seeded generator (anywhere:
    a model request, a tool, a checkpoint write, the startup), then run to its
    end: the uninterrupted answer, every document read, and each kill cost at
    most the one step in flight, counted at the test's servers: a request sent
    again (the model server's repeats) or a tool run again (the tool server's
    extra runs), never both, never a step that had finished. On both stores."""
    rng = random.Random(seed())
    with SimulatedModelServer(model()) as server, ToolServer() as tools:
        kills = kill_at_random(
            kill_plan(DOCS + 1, 4, rng),
            lambda: start(tmp_path, server, store=store_url, tools=tools),
            lambda: server.requests,
        )
        code, stdout, stderr = finish(start(tmp_path, server, store=store_url, tools=tools))
        assert code == 0, stderr
        assert stdout.strip() == ANSWER
        runs = tools.runs()
        assert set(runs) == {f"doc-{i:02d}" for i in range(DOCS)}
        assert server.repeats + sum(runs.values()) - DOCS <= kills, (kills, runs, server.repeats)
