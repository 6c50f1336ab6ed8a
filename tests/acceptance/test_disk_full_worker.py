"""A full disk under a worker is reported once: one traceback, one error line.

``cairn worker`` runs four tasks at once on a SQLite store in a small tmpfs
(tests/filesystems.py); one step fills the disk, so every running task meets
it. The worker stops with the clear line ("the disk holding the SQLite store
... is full ... Free space, then run again") and exit code 2. Each task's
failed hand-back (the full disk refuses it too) is one line; the error's
traceback is logged once, for whoever debugs it, not once per thread and
chained with each hand-back's (before: about 250 lines for one event).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.filesystems import small_tmpfs

pytestmark = pytest.mark.acceptance

ROOT = Path(__file__).resolve().parents[2]
TASKS = 4
RUN_TIMEOUT_SECONDS = 120


def cairn(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "from cairn.cli import main; main()", *args]
    return subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_SECONDS
    )


def test_a_full_disk_under_a_worker_logs_one_traceback_and_one_error_line(
    tmp_path: Path,
) -> None:
    """Four tasks meet the full disk at once: the worker exits 2 with exactly one
    error line (the clear one, last) and exactly one traceback, and besides
    them its start line and at most one line per task it could not hand back."""
    with small_tmpfs(tmp_path / "disk", "4m") as disk:
        store = disk / "cairn.db"
        env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
        env["CAIRN_TEST_FILL"] = str(disk / "filler")
        items = tmp_path / "items.jsonl"
        items.write_text("".join(f'{{"n": {n}}}\n' for n in range(TASKS)))
        app = "tests.acceptance.disk_full_app:app"
        enqueued = cairn("enqueue", app, "b", "big", str(items), f"--store={store}", env=env)
        assert enqueued.returncode == 0, enqueued.stderr
        ran = cairn("worker", app, "--burst", f"--concurrency={TASKS}", f"--store={store}", env=env)
    lines = ran.stderr.splitlines()
    assert ran.returncode == 2, ran.stderr
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1, ran.stderr
    assert f"the disk holding the SQLite store {store} is full" in errors[0]
    assert "Free space, then run again" in errors[0]
    assert lines[-1] == errors[0]
    assert ran.stderr.count("Traceback (most recent call last)") == 1, ran.stderr
    assert "During handling of the above exception" not in ran.stderr
    # Log records: the start line, the traceback's header, and at most one line
    # per task it could not hand back.
    records = [line for line in lines if re.match(r"\d{4}-\d\d-\d\dT", line)]
    assert len(records) <= 2 + TASKS, ran.stderr
