"""A ``ctx.map`` SIGKILLed in a real subprocess: the restart runs only the items
without a checkpoint, and no item whose checkpoint was committed runs again.

Runs on SQLite and on PostgreSQL (``store_url``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from cairn.store import open_store
from tests.acceptance.map_script import CONCURRENCY, COUNTRIES, TASK_ID

pytestmark = pytest.mark.acceptance

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 60


def run_script(store_url: str, counts: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tests.acceptance.map_script", store_url, str(counts), *extra]
    return subprocess.run(
        command,
        cwd=ROOT,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def test_a_sigkilled_map_resumes_with_only_the_missing_items(
    store_url: str, tmp_path: Path
) -> None:
    """Killed after 15 committed items (4 threads), the restart completes the map;
    every item with a committed checkpoint ran exactly once, and only items in
    flight at the kill (at most 3 others) ran twice."""
    counts = tmp_path / "counts"
    killed = run_script(store_url, counts, "--kill-after", "15")
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    store = open_store(store_url)
    try:
        committed = {
            record.name.removeprefix("fetch[").removesuffix("]")
            for record in store.load_history(TASK_ID).values()
            if record.kind == "step" and record.status == "completed"
        }
    finally:
        store.close()
    assert len(committed) >= 15

    done = run_script(store_url, counts)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout) == [c.upper() for c in COUNTRIES]
    runs = Counter(line.split()[0] for line in counts.read_text().splitlines())
    assert set(runs) == set(COUNTRIES)
    assert all(runs[c] == 1 for c in committed)
    twice = [c for c, n in runs.items() if n > 1]
    assert all(runs[c] == 2 for c in twice)
    assert len(twice) <= CONCURRENCY - 1
