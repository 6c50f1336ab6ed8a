"""The app that ``cairn worker`` subprocesses run in the worker acceptance tests.

``cairn worker tests.acceptance.worker_app:app --store URL`` runs task
``five_steps``: steps ``s1``..``s5``. Each step function does its (optional)
work, then appends ``task_id step pid`` to the counts file: one line per time a
step function really ran to its end, counted outside the store. Its output is
``step@pid``, so the store's history shows which process recorded each step.

Set by environment variable, read when the module is imported:

* ``CAIRN_TEST_COUNTS``: the counts file (required to run steps).
* ``CAIRN_TEST_LEASE``: the app's lease in seconds (default 30).
* ``CAIRN_TEST_STEP_MS``: milliseconds each step sleeps first (default 0).
* ``CAIRN_TEST_BLOCK_AT``: a step name; that step blocks until the file
  ``release`` appears in ``CAIRN_TEST_GATE_DIR``, after touching
  ``blocked-PID`` there, so a test knows exactly where the process is.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from cairn import Cairn, Context, TaskDef
from cairn.retry import NO_RETRY

STEPS = ("s1", "s2", "s3", "s4", "s5")
TASK_NAME = "five_steps"
BLOCK_TIMEOUT_SECONDS = 60.0


def _env_float(name: str, default: float) -> float:
    return float(os.environ.get(name) or default)


def append_count(task_id: str, step: str) -> None:
    """One O_APPEND write per line: whole lines even from many processes."""
    fd = os.open(os.environ["CAIRN_TEST_COUNTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{task_id} {step} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


def wait_at_gate(step: str) -> None:
    """Block in ``step`` if the test asked for it, until it releases the gate."""
    if os.environ.get("CAIRN_TEST_BLOCK_AT") != step:
        return
    gate = Path(os.environ["CAIRN_TEST_GATE_DIR"])
    (gate / f"blocked-{os.getpid()}").touch()
    deadline = time.monotonic() + BLOCK_TIMEOUT_SECONDS
    while not (gate / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.01)  # real-sleep-ok: a gate the test process opens


def work(task_id: str, step: str) -> str:
    """A step's function: its work, then its count line (written last, so a
    process killed inside the step leaves no line)."""
    wait_at_gate(step)
    delay = _env_float("CAIRN_TEST_STEP_MS", 0.0) / 1000
    if delay:
        time.sleep(delay)  # real-sleep-ok: the step's simulated work
    append_count(task_id, step)
    return f"{step}@{os.getpid()}"


def five_steps(ctx: Context, n: int) -> list[str]:
    """The task: five checkpointed steps, each recorded with the pid that ran it."""
    return [ctx.step(step, work, ctx.task_id, step) for step in STEPS]


def make_app(store: str | None = None) -> tuple[Cairn, TaskDef[[int], list[str]]]:
    """A new app with ``five_steps`` registered (tests enqueue through their own)."""
    # No task retries: these steps never fail, so a failure is the store's (or
    # a bug), and it should show at once rather than after retries.
    created = Cairn(
        store,
        lease=_env_float("CAIRN_TEST_LEASE", 30.0),
        poll_interval=0.1,
        task_retry=NO_RETRY,
    )
    return created, created.task(name=TASK_NAME)(five_steps)


app, task = make_app()
