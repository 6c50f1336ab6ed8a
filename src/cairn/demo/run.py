"""``run_demo``: run 1 in a worker that gets killed, run 2 here, then the counts."""

from __future__ import annotations

import secrets
import tempfile
import time
from datetime import date
from pathlib import Path

from rich.console import Console

from cairn.demo import report
from cairn.demo.batch import STEPS, DemoFiles, StepLog, batch_name, run_worker
from cairn.demo.check import read_snapshot, verify
from cairn.demo.live import StepProgress, watching
from cairn.demo.worker import KillPlan, kill_part_way, start_worker


def _workdir(workdir: Path | None) -> Path:
    if workdir is None:
        return Path(tempfile.mkdtemp(prefix="cairn-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    return workdir.resolve()


def run_demo(workdir: Path | None = None, *, apps: int = 30, seed: int | None = None) -> int:
    """Run the review batch, SIGKILL its worker part way, run it again, and print
    what was skipped, what ran, and how often each step ran.

    Returns 0 when the worker was killed, the batch then completed, every step
    ran exactly once and every app's settings were applied once; else 1.
    """
    if apps < 1:
        raise ValueError(f"apps must be at least 1, not {apps}")
    started = time.monotonic()
    console = Console(highlight=False)
    seed = secrets.randbelow(10_000) if seed is None else seed
    files = DemoFiles(_workdir(workdir))
    batch = batch_name(date.today())
    report.intro(console, files, batch, apps, seed)
    leftovers = files.existing()
    if leftovers:
        # The demo starts from an empty store; only its own files are removed.
        for path in leftovers:
            path.unlink()
        report.cleared(console, leftovers)

    total_steps = apps * len(STEPS)
    worker = start_worker(files, batch, apps)
    report.run1_starts(console, worker.pid)
    with StepProgress(console, "run 1", total_steps) as progress:
        kill = kill_part_way(worker, files, KillPlan.from_seed(seed, total_steps), progress.update)
    snapshot = read_snapshot(files, batch)
    report.run1(console, kill, snapshot, apps)

    report.run2_starts(console)
    with (
        StepProgress(console, "run 2", total_steps) as progress,
        watching(StepLog(files.step_log), progress),
    ):
        rerun = run_worker(files, batch, apps)
    verdict = verify(files, batch, apps, snapshot)
    report.run2(console, rerun, snapshot, verdict)
    report.outcome(console, verdict)
    report.footer(console, time.monotonic() - started, files.store)
    return 0 if kill.killed and verdict.ok else 1
