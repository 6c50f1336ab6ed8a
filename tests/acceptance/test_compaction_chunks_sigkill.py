"""An agent SIGKILLed between two chunks of a compaction does not pay for the
chunks already answered again.

The agent (``notes_task`` of ``tests/fixtures/chunked_compaction/make.py``: 16
notes, one compaction whose head its ``LLMSummarizer`` folds in 8 requests of a
2,000-token window, then one model call) runs in a subprocess; the summarizer's
model and the agent's are two simulated servers in this test process, which
count every request across the kill. The child is SIGKILLed:

* just before the second chunk's request leaves (an httpx request hook in the
  child), so that the first chunk was answered and nothing else was sent;
* just before the last chunk's request leaves (seven answered);
* once the last chunk's entry is written and before the summary row
  (``after_conv`` of the eighth ``conv`` entry).

Run again, it ends as a run never killed does (the same answer, the same rows,
the same summary), and the two processes together sent the summarizer exactly
the 8 requests of that run: none twice. ``cairn cost`` counts each of them once.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cairn.agent.archive import iter_history
from cairn.agent.costs import cost_report
from cairn.agent.simulate import SimulatedModelServer
from cairn.store import open_store
from tests.agent_server import Scripted, model_server
from tests.crashes import finish_child, start_child
from tests.fixtures.chunked_compaction.make import SUMMARY

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

TIMEOUT = 60
CHUNKS = 8

# The child: the notes agent on the test's two servers. It SIGKILLs itself
# when the summarizer's nth request is about to be sent ("request"), or the nth
# time a fault point is reached; once (a marker file says it did).
CHILD = """
import os, signal, sys
import openai
from cairn import Cairn
from cairn.testing import set_fault_hook
from tests.crashes import sigkill_at
from tests.fixtures.chunked_compaction.make import notes_task, summarizer

store, summarizer_url, agent_url, point, nth, marker = sys.argv[1:7]
sent = [0]

def kill_before(request):
    sent[0] += 1
    if point == "request" and sent[0] == int(nth):
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        os.kill(os.getpid(), signal.SIGKILL)

http = openai.DefaultHttpxClient(event_hooks={"request": [kill_before]})
summarizer_client = openai.OpenAI(
    base_url=summarizer_url, api_key="sk-test", max_retries=0, http_client=http
)
client = openai.OpenAI(base_url=agent_url, api_key="sk-test", max_retries=0)
app = Cairn(f"sqlite:///{store}")
if point != "request":
    set_fault_hook(app, sigkill_at(point, int(nth), marker))
with app:
    print(app.run(notes_task(app, summarizer(summarizer_client), client), task_id="notes"))
"""


def start(
    store: Path, summarizer: SimulatedModelServer, agent: SimulatedModelServer, point: str, nth: int
) -> subprocess.Popen[str]:
    """The agent in a subprocess, on ``store`` and the test's two servers."""
    marker = store.with_suffix(".killed")
    urls = [summarizer.base_url, agent.base_url]
    return start_child(CHILD, str(store), *urls, point, str(nth), str(marker))


def stored(store: Path) -> dict[str, Any]:
    """The rows of the run's conversation and ``cairn cost``'s total."""
    opened = open_store(f"sqlite:///{store}")
    try:
        rows = [(r.idx, r.kind, r.message) for r in iter_history(opened, "notes", "main")]
        total = cost_report(opened, task_id="notes").total
    finally:
        opened.close()
    return {"rows": rows, "total": total}


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[Any]]:
    """A run never killed (once for the module): its answer and its rows."""
    store = tmp_path_factory.mktemp("clean") / "clean.db"
    with model_server(Scripted([SUMMARY])) as summ, model_server(Scripted(["Noted."])) as agent:
        code, out, err = finish_child(start(store, summ, agent, "-", 0), TIMEOUT)
        assert code == 0, err
        assert summ.requests == CHUNKS
    return out, stored(store)["rows"]


@pytest.mark.parametrize(
    ("point", "nth", "answered"),
    [
        ("request", 2, 1),  # before the second chunk's request
        ("request", CHUNKS, CHUNKS - 1),  # before the last chunk's request
        ("after_conv", CHUNKS, CHUNKS),  # the last chunk recorded, no summary yet
    ],
)
def test_killed_between_chunks_it_sends_only_the_chunks_not_answered(
    tmp_path: Path, clean: tuple[str, list[Any]], point: str, nth: int, answered: int
) -> None:
    """SIGKILLed with ``answered`` chunks answered and run again: the answer and
    the rows are the uninterrupted run's, the summarizer got each of the 8
    requests once (none twice), the agent's model once, and ``cairn cost``
    counts one compaction and exactly the tokens the summarizer's server counted."""
    answer, rows = clean
    store = tmp_path / "agent.db"
    with model_server(Scripted([SUMMARY])) as summ, model_server(Scripted(["Noted."])) as agent:
        code, _, err = finish_child(start(store, summ, agent, point, nth), TIMEOUT)
        assert code == -signal.SIGKILL, err
        assert summ.requests == answered
        code, out, err = finish_child(start(store, summ, agent, "-", 0), TIMEOUT)
        assert code == 0, err
        assert (summ.requests, summ.repeats) == (CHUNKS, 0)
        assert (agent.requests, agent.repeats) == (1, 0)
        counted = (summ.prompt_tokens, summ.completion_tokens)
    resumed = stored(store)
    assert out == answer
    assert resumed["rows"] == rows
    total = resumed["total"]
    assert (total.compactions, total.failed_compactions) == (1, 0)
    usage = total.summarizer_usage
    assert (usage.input_tokens, usage.output_tokens) == counted
