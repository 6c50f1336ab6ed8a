"""An Agents SDK run with a pending tool approval survives SIGKILL, waits durably,
and completes once approved, every tool run once.

The agent is ``tests/acceptance/approval_agent_app.py`` (``run(...,
approvals="wait")``), run in subprocesses against a simulated OpenAI-compatible
server in this test process, which counts every request across the kills (a
request identical to an earlier one is a call sent twice). Its tools count
themselves in a file of the test's own.

1. The first process is SIGKILLed right after the model's second response is
   recorded: it asks for ``refund`` (which needs a person's approval) and
   ``notify`` in one response, so an approval is pending and nobody has been
   asked yet.
2. Run again, the task replays (no request), runs ``notify``, and stops at
   the durable wait for ``approve refund call_refund``: the process exits
   (code 3), the task is ``waiting`` with no owner.
3. ``cairn signal TASK "approve refund call_refund" true`` from another process.
4. Run again: the refund runs, the model answers, the task completes.

On SQLite and PostgreSQL (``store_url``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from cairn import Cairn
from tests.acceptance.approval_agent_app import support_model
from tests.agent_server import model_server

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CLI = [str(Path(sys.executable).with_name("cairn"))]
TIMEOUT = 90
TASK = "support-o-1"
SIGNAL = "approve refund call_refund"


def child(
    store_url: str, base_url: str, counts: Path, point: str = "-", nth: int = 0
) -> subprocess.CompletedProcess[str]:
    """One process running the task once (SIGKILLed at ``point``'s ``nth`` time)."""
    marker = counts.with_suffix(".killed")
    module = "tests.acceptance.approval_agent_app"
    arguments = [store_url, base_url, TASK, "o-1", point, str(nth), str(marker)]
    return _run([sys.executable, "-m", module, *arguments], counts)


def _run(command: list[str], counts: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CAIRN_TEST_COUNTS": str(counts), "OPENAI_AGENTS_DISABLE_TRACING": "1"}
    return subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )


def tool_runs(counts: Path) -> Counter[str]:
    lines = counts.read_text().splitlines() if counts.exists() else []
    return Counter(line.split()[0] for line in lines)


def test_a_pending_approval_survives_sigkill_and_every_tool_runs_once(
    store_url: str, tmp_path: Path
) -> None:
    """SIGKILLed with the refund's approval pending, run again to the durable
    wait (exit 3, waiting, no owner, notify run once), approved by ``cairn
    signal`` from another process, run again to the end: lookup, notify and
    refund each ran once, the server got three requests and none twice."""
    counts = tmp_path / "counts"
    with model_server(support_model) as server:
        killed = child(store_url, server.base_url, counts, "after_llm", 2)
        assert killed.returncode == -9, killed.stdout + killed.stderr
        assert (server.requests, tool_runs(counts)) == (2, Counter({"lookup": 1}))

        waiting = child(store_url, server.base_url, counts)
        assert waiting.returncode == 3, waiting.stdout + waiting.stderr
        assert SIGNAL in waiting.stdout
        assert server.requests == 2
        assert tool_runs(counts) == Counter({"lookup": 1, "notify": 1})
        with Cairn(store_url) as look:
            row = look.store.get_task(TASK)
            assert row is not None
            assert (row.status, row.owner) == ("waiting", None)

        sent = _run([*CLI, "signal", TASK, SIGNAL, "true", "--store", store_url], counts)
        assert sent.returncode == 0, sent.stdout + sent.stderr

        done = child(store_url, server.base_url, counts)
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.strip() == "Refunded o-1."
        assert (server.requests, server.repeats) == (3, 0)
    assert tool_runs(counts) == Counter({"lookup": 1, "notify": 1, "refund": 1})
    with Cairn(store_url) as look:
        row = look.store.get_task(TASK)
        assert row is not None
        assert row.status == "completed"
