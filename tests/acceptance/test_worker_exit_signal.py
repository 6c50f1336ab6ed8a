"""A ``--burst`` worker that has finished exits 0, even if SIGTERM arrives as it
exits.

A supervisor or a CI job may send SIGTERM just as the worker ends on its own
(it drained the queue). The worker's handler only notes a signal; but while
the interpreter shuts down, Python puts the default action back for the
signals it handled, and a SIGTERM then ended the process by signal 15 after a
clean run (measured: 6 of 6 within 50 ms of the summary). Here the test sends
SIGTERM every millisecond from the moment the summary line appears until the
process is gone: every one of those signals lands in the worker's last moments.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.acceptance.worker_app import make_app

pytestmark = pytest.mark.acceptance

ROOT = Path(__file__).resolve().parents[2]
SUMMARY = b"cairn worker: ran "
RUNS = 2
EXIT_TIMEOUT_SECONDS = 60.0


def run_and_signal_at_exit(store: str, counts: Path) -> tuple[int, int]:
    """Run a burst worker; from its summary line on, SIGTERM it every
    millisecond until it is gone. (Its exit status, signals sent.)"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env["CAIRN_TEST_COUNTS"] = str(counts)
    command = [sys.executable, "-c", "from cairn.cli import main; main()", "worker"]
    command += ["tests.acceptance.worker_app:app", "--burst", "--concurrency=1", f"--store={store}"]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.PIPE)
    assert process.stderr is not None
    for line in process.stderr:
        if SUMMARY in line:
            break
    sent = 0
    deadline = time.monotonic() + EXIT_TIMEOUT_SECONDS
    while process.poll() is None and time.monotonic() < deadline:
        try:
            process.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            break
        sent += 1
        time.sleep(0.001)  # real-sleep-ok: a signal every millisecond while it exits
    process.stderr.close()
    return process.wait(EXIT_TIMEOUT_SECONDS), sent


def test_a_burst_worker_signalled_as_it_exits_still_exits_0(tmp_path: Path) -> None:
    """A burst worker runs its one task, logs its summary, and is sent SIGTERM
    every millisecond from that line until it is gone: it exits with code 0,
    not by the signal, every time."""
    store = f"sqlite:///{tmp_path / 'cairn.db'}"
    results = []
    for run in range(RUNS):
        app, task = make_app(store)
        with app:
            app.enqueue(f"b{run}", task, [{"n": run}])
        results.append(run_and_signal_at_exit(store, tmp_path / "counts"))
    assert all(sent > 0 for _, sent in results), results
    assert [code for code, _ in results] == [0] * RUNS, results
