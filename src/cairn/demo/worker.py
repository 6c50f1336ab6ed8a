"""Run 1: the batch in a child process, killed with SIGKILL part way through."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from cairn.demo.batch import DemoFiles, StepLog

# How often the parent looks at the step log, and how long it waits at most for
# the worker to reach the kill point (a stuck worker is killed there anyway).
_POLL_SECONDS = 0.005
_WAIT_AT_MOST_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class KillPlan:
    """When to kill: after ``at_steps`` finished steps, then ``extra_ms`` more.

    The extra delay makes the kill land at an arbitrary point of the steps in
    flight rather than right after the step that reached the count.
    """

    at_steps: int
    extra_ms: int

    @classmethod
    def from_seed(cls, seed: int, total_steps: int) -> KillPlan:
        chance = random.Random(seed)
        at_steps = max(1, round(total_steps * chance.uniform(0.35, 0.45)))
        return cls(at_steps=at_steps, extra_ms=chance.randint(5, 45))


@dataclass(frozen=True, slots=True)
class KillResult:
    """How run 1 ended."""

    pid: int
    killed: bool
    seconds: float
    returncode: int


def start_worker(files: DemoFiles, batch: str, apps: int) -> subprocess.Popen[bytes]:
    """Start ``python -m cairn.demo --child`` on the batch; its output goes to a file."""
    command = [sys.executable, "-m", "cairn.demo", "--child", "--workdir", str(files.workdir)]
    command += ["--batch", batch, "--apps", str(apps)]
    with files.worker_log.open("wb") as output:
        return subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)


def kill_part_way(
    process: subprocess.Popen[bytes],
    files: DemoFiles,
    plan: KillPlan,
    on_poll: Callable[[int], None] = lambda finished: None,
) -> KillResult:
    """SIGKILL the worker once the plan's moment comes, then reap it.
    ``on_poll`` is told how many steps have finished each time the log is read."""
    started = time.monotonic()
    try:
        deadline = started + _WAIT_AT_MOST_SECONDS
        _wait_for(process, StepLog(files.step_log), plan, deadline, on_poll)
    except BaseException:
        process.kill()  # never leave a worker running behind an interrupted demo
        process.wait()
        raise
    killed = process.poll() is None
    if killed:
        os.kill(process.pid, signal.SIGKILL)
    seconds = time.monotonic() - started
    # Reap it, so its pid is gone (not a zombie) and the rerun reclaims its tasks.
    returncode = process.wait()
    return KillResult(pid=process.pid, killed=killed, seconds=seconds, returncode=returncode)


def _wait_for(
    process: subprocess.Popen[bytes],
    log: StepLog,
    plan: KillPlan,
    deadline: float,
    on_poll: Callable[[int], None],
) -> None:
    while process.poll() is None and time.monotonic() < deadline:
        finished = log.lines()
        on_poll(finished)
        if finished >= plan.at_steps:
            break
        time.sleep(_POLL_SECONDS)
    if process.poll() is None:
        time.sleep(plan.extra_ms / 1000)
