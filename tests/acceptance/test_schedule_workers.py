"""A schedule ticked by three real ``cairn worker`` processes: each firing runs once.

Three ``cairn worker tests.acceptance.schedule_app:app`` subprocesses share one
store (a SQLite file, then a PostgreSQL database) and all tick the same
every-two-seconds schedule. The task body appends a line per run to a counts
file, so runs are counted outside the store. Waits are polls with deadlines on
real processes; nothing asserts how long anything took.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from cairn.store import open_store
from tests.servers import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.acceptance.schedule_app:app"
BATCH = "schedule:heartbeat"
FIRINGS_TO_SEE = 4
WAIT_SECONDS = 60
STOP_SECONDS = 60


def start_worker(url: str, counts: Path, log_path: Path) -> subprocess.Popen[bytes]:
    """``cairn worker`` (not burst: it ticks the schedule until SIGTERM)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env["CAIRN_TEST_COUNTS"] = str(counts)
    command = [
        sys.executable,
        "-c",
        "from cairn.cli import main; main()",
        "worker",
        APP,
        "--concurrency=2",
        "--idle-wait=0.2",
        f"--store={url}",
    ]
    with log_path.open("wb") as log_file:
        return subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT
        )


def runs_per_firing(counts: Path) -> Counter[str]:
    if not counts.exists():
        return Counter()
    return Counter(line.split(" ")[0] for line in counts.read_text().splitlines())


def test_three_workers_run_each_firing_exactly_once(store_url: str, tmp_path: Path) -> None:
    """Three workers tick one schedule for several firings: every firing is
    created once (consecutive, two seconds apart, none missing) and its body runs
    exactly once, whichever worker created or ran it."""
    open_store(store_url).close()  # the schema exists before three processes race for it
    counts = tmp_path / "counts.txt"
    logs = [tmp_path / f"worker-{n}.log" for n in range(3)]
    workers = [start_worker(store_url, counts, log) for log in logs]
    try:
        seen = wait_until(lambda: len(runs_per_firing(counts)) >= FIRINGS_TO_SEE, WAIT_SECONDS)
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        stopped = wait_until(lambda: all(w.poll() is not None for w in workers), STOP_SECONDS)
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    codes = [worker.returncode for worker in workers]
    output = "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')}" for log in logs)
    assert stopped, f"a worker did not stop on SIGTERM (exit codes {codes}):\n{output}"
    assert seen, f"fewer than {FIRINGS_TO_SEE} firings ran:\n{output}"
    assert codes == [0, 0, 0], output

    runs = runs_per_firing(counts)
    assert all(n == 1 for n in runs.values()), f"a firing ran more than once: {runs}"
    store = open_store(store_url)
    try:
        tasks = list(store.list_tasks(batch=BATCH))
    finally:
        store.close()
    fired = sorted(datetime.fromisoformat(task.item_key or "") for task in tasks)
    assert fired == [fired[0] + n * timedelta(seconds=2) for n in range(len(fired))]
    completed = {datetime.fromisoformat(t.result.strip('"')) for t in tasks if t.result}
    assert {datetime.fromisoformat(when) for when in runs} == completed
    assert all(t.status in ("completed", "pending") for t in tasks)
    assert sum(t.status == "completed" for t in tasks) == len(runs) >= FIRINGS_TO_SEE
