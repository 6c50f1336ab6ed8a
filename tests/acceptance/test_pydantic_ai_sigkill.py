"""A Pydantic AI agent SIGKILLed mid-run resumes without paying or acting twice.

The agent is ``examples/pydantic_ai_agent.py`` (``CairnDurability`` among its
capabilities), run in a subprocess against a simulated OpenAI-compatible server
in this test process, which counts every request and its tokens across every
kill (a request identical to an earlier one is a call sent twice). Its tools
count themselves in files of this test's own: the child counts every
``read_document`` call in one, and ``file_report`` writes the report to the
ledger, the outside system.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cairn.agent.costs import cost_report
from cairn.agent.simulate import SimulatedModelServer
from cairn.store import open_store
from tests.acceptance.random_kills import (
    POST_TOOL_RUN,
    ToolServer,
    kill_at_random,
    kill_plan,
    seed,
)
from tests.servers import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "pydantic_ai_agent.py"
DOCS = 4
TASK = "pydantic-ai/shelf"
ANSWER = "Filed the report."
REPORT = f"Read {DOCS} documents. Summary ({DOCS} documents): sales by region."
# The lead: list, two turns of two reads, summarize, file, answer; and the summarizer once.
REQUESTS = 1 + DOCS // 2 + 3 + 1
# A hang guard, not a measure: a child run takes seconds, but minutes on a
# machine loaded by two suites and other work (seen: over 180 s at load 17).
TIMEOUT = 600

# The child: the example's app on the test's server. Every read_document call is
# counted in a file of the test's (the tool calls read_text through the module).
# A fault hook SIGKILLs the process the nth time it reaches a point (once: a
# marker file).
CHILD = (
    POST_TOOL_RUN
    + """
import importlib.util, json, os, signal, sys
from cairn.testing import set_fault_hook

example, point, nth, marker, reads, docs = sys.argv[1:7]
spec = importlib.util.spec_from_file_location("pydantic_ai_example", example)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
text_of = module.read_text

def counted(name):
    with open(reads, "a") as file:
        file.write(name + "\\n")
    if os.environ.get("CAIRN_TEST_TOOL_URL"):
        post_tool_run(name)
    return text_of(name)

module.read_text = counted
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
    result = module.app.run(module.research, task_id="pydantic-ai/shelf", topic="shelf",
                            docs=int(docs))
print(json.dumps(result))
"""
)


class Files:
    """The test's own files: the store, the ledger, the count of reads."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.store = root / "agent.db"
        self.ledger = root / "reports.jsonl"
        self.reads = root / "reads.txt"

    def ledger_lines(self) -> list[dict[str, Any]]:
        text = self.ledger.read_text() if self.ledger.exists() else ""
        return [json.loads(line) for line in text.splitlines()]

    def read_counts(self) -> Counter[str]:
        text = self.reads.read_text() if self.reads.exists() else ""
        return Counter(text.split())


def start(
    files: Files,
    server: SimulatedModelServer,
    point: str = "-",
    nth: int = 0,
    tools: ToolServer | None = None,
) -> subprocess.Popen[str]:
    """The example in a subprocess, its endpoint the test's server (through the
    environment, as a user would set it)."""
    marker = files.root / f"{point}.{nth}.killed"
    env = {
        **os.environ,
        "CAIRN_STORE": f"sqlite:///{files.store}",
        "CAIRN_EXAMPLE_LEDGER": str(files.ledger),
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "sk-test",
        **({} if tools is None else {"CAIRN_TEST_TOOL_URL": tools.url}),
    }
    arguments = [str(EXAMPLE), point, str(nth), str(marker), str(files.reads), str(DOCS)]
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=files.root,
        env=env,
    )


def finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    stdout, stderr = process.communicate(timeout=TIMEOUT)
    return process.returncode, stdout, stderr


def researcher() -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The example's simulated model, for the test's server."""
    spec = importlib.util.spec_from_file_location("pydantic_ai_model", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    respond: Callable[[dict[str, Any]], dict[str, Any]] = module.simulated_researcher
    return respond


def test_killed_at_each_kind_of_boundary_it_sends_runs_and_counts_nothing_twice(
    tmp_path: Path,
) -> None:
    """SIGKILLed after its 2nd recorded model response, after the delegating
    summarize call was recorded, after the report was filed but before that was
    recorded, and after its last response was recorded, the agent finishes on
    the fifth run without a request: the server saw each request once, every
    document was read once, the ledger holds one report (the filing in doubt
    was reconciled from the ledger), and the run's usage and cairn cost's
    tokens are exactly the server's: every call's tokens counted once, the
    delegate's included, as in a run that was never killed."""
    files = Files(tmp_path)
    # The second run's live steps: the reads, then summarize (the first run
    # recorded list_documents).
    steps_to_summarize = DOCS + 1
    kills = (
        ("after_llm", 2),
        ("after_step", steps_to_summarize),
        ("after_act", 1),
        ("after_llm", 1),
    )
    with SimulatedModelServer(researcher()) as server:
        for point, nth in kills:
            code, _, stderr = finish(start(files, server, point, nth))
            assert code == -signal.SIGKILL, stderr
        assert server.requests == REQUESTS  # the last run was killed after the last one
        code, stdout, stderr = finish(start(files, server))
        assert code == 0, stderr
        assert server.repeats == 0
        assert server.requests == REQUESTS
        tokens = (server.prompt_tokens, server.completion_tokens)
    result = json.loads(stdout)
    assert result["answer"] == ANSWER
    usage = result["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == tokens
    assert usage["requests"] == REQUESTS
    assert files.read_counts() == Counter({f"doc-{n:02d}": 1 for n in range(DOCS)})
    assert [line["report"] for line in files.ledger_lines()] == [REPORT]
    store = open_store(str(files.store))
    try:
        report = cost_report(store).total
    finally:
        store.close()
    assert (report.usage.input_tokens, report.usage.output_tokens) == tokens


def test_killed_from_outside_at_random_moments_it_repeats_at_most_what_was_in_flight(
    tmp_path: Path,
) -> None:
    """SIGKILLed from outside once the server has seen four requests (so
    anywhere: during a call, a tool, the delegation), the agent finishes with
    the same answer; the kill cost at most the one request in flight, and the
    ledger holds exactly one report."""
    files = Files(tmp_path)
    with SimulatedModelServer(researcher()) as server:
        process = start(files, server)
        reached = wait_until(lambda: server.requests >= 4, TIMEOUT)
        os.kill(process.pid, signal.SIGKILL)
        code, _, stderr = finish(process)
        assert reached, stderr
        kills = int(code == -signal.SIGKILL)
        code, stdout, stderr = finish(start(files, server))
        assert code == 0, stderr
        assert server.repeats <= kills
    assert json.loads(stdout)["answer"] == ANSWER
    assert [line["report"] for line in files.ledger_lines()] == [REPORT]
    reads = files.read_counts()
    assert set(reads) == {f"doc-{n:02d}" for n in range(DOCS)}
    assert sum(reads.values()) <= DOCS + kills  # a kill can catch one read in flight


# Reads run together in a turn (two a turn): a kill can catch both in flight.
READS_A_TURN = 2


@pytest.mark.slow
@pytest.mark.timeout(2400)  # a hang guard for five child runs under load
def test_killed_at_seeded_random_moments_only_the_step_in_flight_repeats(tmp_path: Path) -> None:
    """SIGKILLed four times at moments drawn from a seeded generator (anywhere:
    a model request, a tool, the delegation, the startup), then run to its end:
    the uninterrupted answer; at the model server, at most one request repeated
    per kill; at the test's tool server, every document read, and at most a
    turn's reads repeated per kill (no read recorded before a kill runs again);
    one report in the ledger."""
    files = Files(tmp_path)
    rng = random.Random(seed())
    with SimulatedModelServer(researcher()) as server, ToolServer() as tools:
        kills = kill_at_random(
            kill_plan(REQUESTS, 4, rng),
            lambda: start(files, server, tools=tools),
            lambda: server.requests,
        )
        code, stdout, stderr = finish(start(files, server, tools=tools))
        assert code == 0, stderr
        assert server.repeats <= kills
        reads = tools.runs()
    assert json.loads(stdout)["answer"] == ANSWER
    assert set(reads) == {f"doc-{n:02d}" for n in range(DOCS)}
    assert sum(reads.values()) - DOCS <= READS_A_TURN * kills, (kills, reads)
    assert [line["report"] for line in files.ledger_lines()] == [REPORT]
