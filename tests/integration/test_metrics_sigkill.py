"""The restart metrics after a real SIGKILL: a batch process killed mid-step, then
run again, shows one interrupted task that completed and no completed step run
twice, as the counts file written by the step functions independently says."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from cairn.observe import compute
from cairn.store import open_store
from tests.acceptance.batch_script import BATCH, STEPS, task_id

pytestmark = pytest.mark.acceptance

SCRIPT = Path(__file__).parents[1] / "acceptance" / "batch_script.py"
TASKS = 6
KILLED = 2


def run_script(tmp_path: Path, kill_at: str) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable,
        str(SCRIPT),
        f"--store={tmp_path / 'batch.db'}",
        f"--counts={tmp_path / 'counts.txt'}",
        f"--tasks={TASKS}",
        "--concurrency=1",
        "--work-ms=2",
        f"--kill-at={kill_at}",
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_metrics_after_sigkill_and_restart(tmp_path: Path) -> None:
    """Killed inside step s3 of task 2, then restarted: interrupted 1, completed
    after it 1, suspect re-runs 0, and each step call the store records is a
    line in the counts file (one per (task, step): nothing ran twice)."""
    killed = run_script(tmp_path, f"inside-step:{KILLED}:s3")
    assert killed.returncode == -9, killed.stderr
    store = open_store(str(tmp_path / "batch.db"))
    try:
        before = compute(store)
        # The dead process still "owns" its task: running, not yet interrupted.
        assert before.tasks_by_status.get("running") == 1
        assert before.restarts.interrupted_tasks == 0
        resumed = run_script(tmp_path, "none")
        assert resumed.returncode == 0, resumed.stderr
        after = compute(store)
    finally:
        store.close()

    lines = (tmp_path / "counts.txt").read_text().splitlines()
    calls = Counter(tuple(line.split(" ")[:2]) for line in lines)
    assert set(calls) == {(task_id(n), s) for n in range(TASKS) for s in STEPS}
    assert max(calls.values()) == 1  # independent: no step function ran to its end twice
    assert after.tasks_by_status == {"completed": TASKS}
    assert after.restarts.interrupted_tasks == 1
    assert after.restarts.completed_after_interruption == 1
    assert after.restarts.restart_success_rate == 1.0
    assert after.restarts.suspect_reruns == 0
    assert after.retries.step_calls == sum(calls.values())
    assert after.retries.step_retries == 0
    assert {s.name: s.count for s in after.steps} == dict.fromkeys(STEPS, TASKS)
    (batch,) = after.batches
    assert batch.name == BATCH
    assert batch.unfinished == 0
