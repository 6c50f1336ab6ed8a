"""An agent clearing old tool results, SIGKILLed mid-run, resumes with the same
cleared context: every request it sends afterwards is the one an uninterrupted
run sends, and none is sent twice.

The agent is ``tests/integration/test_tool_clearing.py``'s page fetcher (a
17,000-token first page, ``ToolResultClearing(keep=3)``), run in a subprocess
against the local model server of ``tests/agent_server.py``, which runs in this
test process and so sees every request across the kill.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cairn.agent.archive import load_conversation
from cairn.store import open_store
from tests.agent_server import model_server
from tests.integration.test_tool_clearing import PAGES, fetcher_model

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

TIMEOUT = 60
CHILD = """
import os, signal, sys
import openai
from cairn import Cairn
from cairn.agent import ToolResultClearing
from cairn.testing import set_fault_hook
from tests.integration.test_tool_clearing import fetcher

store, base_url, point, nth = sys.argv[1:5]
app = Cairn(f"sqlite:///{store}")
client = openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
task = fetcher(app, client, ToolResultClearing(keep=3))
reached = [0]

def hook(at, task_id, seq, name):
    if at == point:
        reached[0] += 1
        if reached[0] == int(nth):
            os.kill(os.getpid(), signal.SIGKILL)

set_fault_hook(app, hook)
with app:
    print(app.run(task, task_id="f"))
"""


def _run(store: Path, base_url: str, point: str = "-", nth: int = 0) -> tuple[int, str, str]:
    process = subprocess.run(
        [sys.executable, "-c", CHILD, str(store), base_url, point, str(nth)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[2],
        timeout=TIMEOUT,
        check=False,
    )
    return process.returncode, process.stdout, process.stderr


@pytest.mark.parametrize(
    ("point", "nth"), [("after_llm", 7), ("llm_returned", 9), ("before_llm", 11)]
)
def test_killed_it_resumes_with_the_same_cleared_context(
    tmp_path: Path, point: str, nth: int
) -> None:
    """Killed after its 7th recorded call, between the 9th reply's row and its
    entry (the row, with the clearing it records, is adopted: nothing is sent
    again), or before the 11th call (nothing recorded: the same rows decide the
    same clearing): the two processes together send exactly the requests of an
    uninterrupted run, none twice, and the stored conversation shows the same
    cleared context."""
    with model_server(fetcher_model) as clean:
        code, out, err = _run(tmp_path / "clean.db", clean.base_url)
        assert code == 0, err
        expected = clean.bodies
    with model_server(fetcher_model) as server:
        code, _, err = _run(tmp_path / "agent.db", server.base_url, point, nth)
        assert code == -signal.SIGKILL, err
        code, resumed_out, err = _run(tmp_path / "agent.db", server.base_url)
        assert code == 0, err
        sent = server.bodies
    assert resumed_out == out
    assert sent == expected
    store = open_store(f"sqlite:///{tmp_path / 'agent.db'}")
    clean_store = open_store(f"sqlite:///{tmp_path / 'clean.db'}")
    try:
        view = load_conversation(store, "f", "main")
        clean_view = load_conversation(clean_store, "f", "main")
    finally:
        store.close()
        clean_store.close()
    assert view is not None
    assert clean_view is not None
    assert view.messages == clean_view.messages
    assert view.stats.cleared_results == PAGES - 3
