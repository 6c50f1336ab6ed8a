"""A full blob store under ``cairn worker``: one clear line, then the same command goes on.

The store is a SQLite file on the ordinary disk; the blob store (``CAIRN_BLOBS``)
is a small tmpfs that one step fills while it works (tests/filesystems.py). The
worker stops with exit code 2 and one error line naming the blob store, its path
and the fix; no task is failed. Once the filler is removed, the same command
finishes the batch, and no step's function ran twice for an output it had
already produced.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.filesystems import small_tmpfs

pytestmark = pytest.mark.acceptance

ROOT = Path(__file__).resolve().parents[2]
TASKS = 2
RUN_TIMEOUT_SECONDS = 120


def cairn(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "from cairn.cli import main; main()", *args]
    return subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_SECONDS
    )


def test_a_full_blob_store_stops_the_worker_with_one_line_and_the_same_command_goes_on(
    tmp_path: Path,
) -> None:
    """The worker exits 2 with one error line about the blob store (its path, that
    it is full, to free space and run again); the tasks are pending, not failed;
    after space is freed the same command exits 0 with every task completed, and
    each (task, part) function ran exactly once in all."""
    store = tmp_path / "cairn.db"
    calls = tmp_path / "calls.txt"
    app = "tests.acceptance.blob_full_app:app"
    with small_tmpfs(tmp_path / "blobs", "1m") as blobs:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
        env |= {
            "CAIRN_BLOBS": str(blobs),
            "CAIRN_TEST_FILL": str(blobs / "filler"),
            "CAIRN_TEST_CALLS": str(calls),
        }
        items = tmp_path / "items.jsonl"
        items.write_text("".join(f'{{"n": {n}}}\n' for n in range(TASKS)))
        enqueued = cairn("enqueue", app, "b", "big", str(items), f"--store={store}", env=env)
        assert enqueued.returncode == 0, enqueued.stderr
        worker = ("worker", app, "--burst", "--concurrency=1", f"--store={store}")
        stopped = cairn(*worker, env=env)
        assert stopped.returncode == 2, stopped.stderr
        errors = [line for line in stopped.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1, stopped.stderr
        assert f"the disk holding the blob store {blobs} is full" in errors[0]
        assert "Free space there" in errors[0]
        assert "then run again" in errors[0]
        assert stopped.stderr.count("Traceback (most recent call last)") <= 1, stopped.stderr
        listed = cairn("tasks", f"--store={store}", "--status=failed", env=env)
        assert "big" not in listed.stdout, listed.stdout

        (blobs / "filler").unlink()
        env["CAIRN_TEST_FILL"] = str(tmp_path / "no-more-filling")
        (tmp_path / "no-more-filling").write_text("")  # fill_once: already done
        finished = cairn(*worker, env=env)
    assert finished.returncode == 0, finished.stderr
    counted = Counter(calls.read_text().splitlines())
    assert sorted(counted) == sorted(f"{n} {i}" for n in range(TASKS) for i in range(3))
    assert set(counted.values()) == {1}, counted
