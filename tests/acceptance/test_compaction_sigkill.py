"""An agent SIGKILLed while compacting resumes without losing history or paying twice.

The agent (``reader_task`` of ``tests/agent_server.py``: it reads 12 documents
with a tool, compacting at 800 tokens) runs in a subprocess; its model and
its summarizer's model (``LLMSummarizer``) are two simulated servers in this
test process, which count every request across the kills. It is SIGKILLed at
one moment of its second compaction, then run again to the end:

* while the summarizer's request is in flight (the summarizer's server kills
  it before answering): that one request is asked again, identically, and
  nothing else;
* after the summary row was committed and before the compaction's entry
  (``conv_returned``): the resumed run takes the stored summary and asks the
  summarizer nothing;
* after the compaction's entry (``after_conv``): nothing is asked again.

In each case the resumed run ends as a run never killed does: the same answer,
the same rows (every message once, the same summaries, the head still stored
as the archive), the same active context, no agent request sent twice, and
``cairn cost``'s summarizer tokens are what the summarizer's server counted
for the requests whose answer arrived.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cairn.agent.archive import iter_history, load_conversation
from cairn.agent.costs import cost_report
from cairn.agent.messages import text_of
from cairn.agent.simulate import SimulatedModelServer
from cairn.agent.tokens import count_messages
from cairn.store import open_store
from tests.agent_server import DocReader, model_server
from tests.crashes import finish_child, start_child

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

DOCS = 12
GOAL = "Read every document and report."
TIMEOUT = 60
_DOC = re.compile(r"doc-(\d\d) says")

# The child: the reading agent with an LLM summarizer, on the test's two
# servers; it SIGKILLs itself the nth time it reaches a fault point (once: a
# marker file says it did).
CHILD = """
import sys
import openai
from cairn import Cairn
from cairn.agent import LLMSummarizer
from cairn.testing import set_fault_hook
from tests.agent_server import reader_task
from tests.crashes import sigkill_at

store, agent_url, summarizer_url, point, nth, marker, goal = sys.argv[1:8]
app = Cairn(f"sqlite:///{store}")
client = openai.OpenAI(base_url=agent_url, api_key="sk-test", max_retries=0)
summarizer = LLMSummarizer(
    openai.OpenAI(base_url=summarizer_url, api_key="sk-test", max_retries=0), model="gpt-4o-mini"
)
set_fault_hook(app, sigkill_at(point, int(nth), marker))
with app:
    task = reader_task(app, client, threshold=800, keep_tail=300, summarizer=summarizer)
    print(app.run(task, task_id="r", goal=goal))
"""


class SummaryModel:
    """The summarizer's model: says which documents were read, so the reader
    goes on from the next one. ``kill`` is called on the ``kill_at``-th request
    before it is answered (the answer then reaches nobody)."""

    def __init__(self, kill_at: int = 0) -> None:
        self.kill_at = kill_at
        self.kill: Callable[[], None] = lambda: None
        self.seen = 0

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        self.seen += 1
        if self.seen == self.kill_at:
            self.kill()
        text = " ".join(text_of(m) for m in request["messages"])
        latest = max((int(n) for n in _DOC.findall(text)), default=-1)
        read = f"Read up to doc-{latest:02d}: doc-{latest:02d} says it."
        summary = f"Goal: read every document. {read}"
        return {"role": "assistant", "content": summary}


def start(
    store: Path, agent: SimulatedModelServer, summarizer: SimulatedModelServer, point: str, nth: int
) -> subprocess.Popen[str]:
    """The agent in a subprocess, on ``store`` and the test's two servers."""
    marker = store.with_suffix(".killed")
    urls = [agent.base_url, summarizer.base_url]
    return start_child(CHILD, str(store), *urls, point, str(nth), str(marker), GOAL)


def finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    return finish_child(process, TIMEOUT)


def stored(store: Path) -> dict[str, Any]:
    """What the store holds of the run: every row, the active context, and
    ``cairn cost``'s summarizer tokens."""
    opened = open_store(f"sqlite:///{store}")
    try:
        rows = [(r.idx, r.kind, r.message) for r in iter_history(opened, "r", "main")]
        view = load_conversation(opened, "r")
        summarizer = cost_report(opened, task_id="r").total.summarizer_usage
    finally:
        opened.close()
    assert view is not None
    return {"rows": rows, "active": view.messages, "summarizer": summarizer}


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any], int, int]:
    """A run never killed (once for the module): its answer, what it stored,
    and the requests each server got."""
    store = tmp_path_factory.mktemp("clean") / "clean.db"
    with model_server(DocReader(DOCS)) as agent, model_server(SummaryModel()) as summarizer:
        code, out, err = finish(start(store, agent, summarizer, "-", 0))
        assert code == 0, err
        return out, stored(store), agent.requests, summarizer.requests


@pytest.mark.parametrize("point", ["in flight", "conv_returned", "after_conv"])
def test_killed_while_compacting_it_loses_nothing_and_pays_at_most_the_request_in_flight(
    tmp_path: Path, clean: tuple[str, dict[str, Any], int, int], point: str
) -> None:
    """SIGKILLed at ``point`` of the second compaction and run again: the
    answer, the rows and the active context are the uninterrupted run's, no
    agent request is sent twice, the summarizer is asked again only for a
    request whose answer never arrived (once, identically), and the recorded
    summarizer tokens are the server's for the answers that arrived."""
    answer, expected, agent_requests, summarizer_requests = clean
    assert sum(1 for _, kind, _ in expected["rows"] if kind == "summary") >= 3
    store = tmp_path / "agent.db"
    in_flight = point == "in flight"
    model = SummaryModel(kill_at=2 if in_flight else 0)
    with model_server(DocReader(DOCS)) as agent, model_server(model) as summarizer:
        first = start(store, agent, summarizer, "-" if in_flight else point, 2)
        model.kill = lambda: os.kill(first.pid, signal.SIGKILL)
        code, _, err = finish(first)
        assert code == -signal.SIGKILL, err
        assert summarizer.requests == 2
        code, out, err = finish(start(store, agent, summarizer, "-", 0))
        assert code == 0, err
        assert (agent.requests, agent.repeats) == (agent_requests, 0)
        lost = 1 if in_flight else 0
        assert (summarizer.requests, summarizer.repeats) == (summarizer_requests + lost, lost)
        if in_flight:
            assert summarizer.bodies[1] == summarizer.bodies[2]  # the same request again
        answered = summarizer.bodies[:1] + summarizer.bodies[1 + lost :]
        server_input = sum(count_messages(body["messages"]) for body in answered)
    resumed = stored(store)
    assert out == answer
    assert resumed["rows"] == expected["rows"]
    assert resumed["active"] == expected["active"]
    assert resumed["summarizer"].input_tokens == expected["summarizer"].input_tokens
    assert resumed["summarizer"].input_tokens == server_input
