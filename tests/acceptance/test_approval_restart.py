"""An approval wait across process restarts: the process that reaches the wait
exits, holding nothing; `cairn signal` from another process; a `cairn worker`
started later finishes the task. Each step's function runs exactly once.

Runs on SQLite and on PostgreSQL (``store_url``), with real subprocesses.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from cairn import Cairn

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CLI = [str(Path(sys.executable).with_name("cairn"))]
TIMEOUT = 60


def run(command: list[str], counts: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CAIRN_TEST_COUNTS": str(counts)}
    return subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )


def step_runs(counts: Path) -> Counter[str]:
    lines = counts.read_text().splitlines() if counts.exists() else []
    return Counter(line.split()[1] for line in lines)


def test_approval_survives_process_restarts_and_each_step_runs_once(
    store_url: str, tmp_path: Path
) -> None:
    """Process 1 proposes and exits at the wait (code 3, task waiting, no owner);
    `cairn signal` in process 2 wakes it; `cairn worker --burst` in process 3
    replays the proposal without running it and applies once."""
    counts = tmp_path / "counts"
    first = run(
        [sys.executable, "-m", "tests.acceptance.approval_app", store_url, "chg-1", "a1"], counts
    )
    assert first.returncode == 3, first.stdout + first.stderr
    assert "cairn signal chg-1 approval" in first.stdout
    with Cairn(store_url) as look:
        row = look.store.get_task("chg-1")
        assert row is not None
        assert (row.status, row.owner) == ("waiting", None)

    signal = run(
        [*CLI, "signal", "chg-1", "approval", '{"ok": true}', "--store", store_url], counts
    )
    assert signal.returncode == 0, signal.stdout + signal.stderr

    worker = run(
        [*CLI, "worker", "tests.acceptance.approval_app:app", "--store", store_url, "--burst"],
        counts,
    )
    assert worker.returncode == 0, worker.stdout + worker.stderr
    with Cairn(store_url) as look:
        row = look.store.get_task("chg-1")
        assert row is not None
        assert row.status == "completed"
        result = look.codec.decode(row.result or "null")
    assert step_runs(counts) == Counter({"propose": 1, "apply": 1})
    assert result["by"] == {"ok": True}
    assert result["proposed"] != result["applied"]  # different processes did the two steps
