"""A real cairn batch that kills itself with SIGKILL at a chosen moment.

The SIGKILL acceptance test runs this file as a program::

    python batch_script.py --store PATH --counts PATH [--tasks 8] [--concurrency 1]
        [--work-ms 4] [--kill-at none | inside-step:I:S | before-step:I:S
                                     | after-step:I:S | after-task:I]

Batch ``sigkill`` has one task per ``n`` in ``0..tasks-1``. Each task records
``ctx.now()`` and ``ctx.uuid()`` and then runs steps ``s1..s4``. Every step's
output extends the previous one, starting from ``"n@uuid@now"``, so a result
whose outputs disagree with its recorded inputs shows a replay that went wrong.
A step function does its simulated work, then appends ``task_id step pid`` to
the counts file: one line per time the function really ran to its end.

A kill point fires once: a marker file (``--marker``, default ``STORE.killed``)
says it already fired, so the run after the restart goes through.

Why the counts gate: a count line is written just before cairn commits the
step's checkpoint, so a kill landing between the two would re-run the step
after a restart, and no durable engine can prevent that. The kills this script
makes itself must prove exactly-once for every committed step, so they never
land there: a step takes the gate before it writes its line and releases it in
the ``after_step`` hook, once its commit is done; a self-kill takes the gate
first. The gate also means at most one step of a process is ever inside that
window, which the test relies on for kills sent from outside.

Prints a JSON summary of the run and exits 0 when every task completed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from cairn import Cairn, Context, TaskDef
from cairn.testing import set_fault_hook

BATCH = "sigkill"
STEPS = ("s1", "s2", "s3", "s4")
KILL_MODES = ("none", "inside-step", "before-step", "after-step", "after-task")
GATE_TIMEOUT_SECONDS = 10.0


def task_id(index: int) -> str:
    """The id cairn gives the batch task for item ``{"n": index}``."""
    return f"{BATCH}/n={index}"


def first_value(n: int, recorded_uuid: str, recorded_now: datetime) -> str:
    """What step s1 extends: the task's input and both recorded inputs."""
    return f"{n}@{recorded_uuid}@{recorded_now.isoformat()}"


def step_output(previous: str, step_name: str) -> str:
    """A step's output: deterministic in its input."""
    return f"{previous}>{step_name}"


@dataclass(frozen=True)
class KillPoint:
    """Where this run kills itself; ``mode == "none"`` never does."""

    mode: str
    task_id: str | None = None
    step: str | None = None

    @classmethod
    def parse(cls, text: str) -> KillPoint:
        mode, *rest = text.split(":")
        if mode not in KILL_MODES:
            raise argparse.ArgumentTypeError(f"unknown kill mode {mode!r} in {text!r}")
        wanted = {"none": 0, "after-task": 1}.get(mode, 2)
        if len(rest) != wanted:
            raise argparse.ArgumentTypeError(f"{text!r}: {mode} takes {wanted} ':' field(s)")
        if mode == "none":
            return cls(mode)
        step = rest[1] if wanted == 2 else None
        if step is not None and step not in STEPS:
            raise argparse.ArgumentTypeError(f"{text!r}: step must be one of {STEPS}")
        return cls(mode, task_id(int(rest[0])), step)

    def matches(self, mode: str, task: str, step: str | None) -> bool:
        return (self.mode, self.task_id, self.step) == (mode, task, step)


class CountsGate:
    """Makes "write the count line" and "commit the checkpoint" one unit for
    self-kills (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._mine = threading.local()

    def enter(self) -> None:
        if not self._lock.acquire(timeout=GATE_TIMEOUT_SECONDS):
            # A step that never reached its after_step hook: its commit failed.
            sys.stderr.write("batch_script: counts gate held too long; a commit never ended\n")
            os._exit(3)
        self._mine.held = True

    def leave_if_held(self) -> None:
        if getattr(self._mine, "held", False):
            self._mine.held = False
            self._lock.release()

    def held_here(self) -> bool:
        return bool(getattr(self._mine, "held", False))


class Killer:
    """Kills this process with SIGKILL at its kill point, once across restarts."""

    def __init__(self, point: KillPoint, marker: Path, gate: CountsGate) -> None:
        self.point = point
        self._marker = marker
        self._gate = gate

    def maybe_kill(self, mode: str, task: str, step: str | None) -> None:
        if not self.point.matches(mode, task, step):
            return
        try:
            # O_EXCL: exactly one run ever sees the marker as new.
            os.close(os.open(self._marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        if not self._gate.held_here():
            self._gate.enter()  # no other step may be between its count line and commit
        os.kill(os.getpid(), signal.SIGKILL)


class CountsFile:
    """Appends one line per step that ran to its end."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def add(self, task: str, step: str) -> None:
        line = f"{task} {step} {os.getpid()}\n".encode()
        fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)  # one O_APPEND write: lines never interleave
        finally:
            os.close(fd)


def make_step(
    name: str, work_seconds: float, killer: Killer, gate: CountsGate, counts: CountsFile
) -> Callable[[str, str], str]:
    """The function behind step ``name``: work, maybe die halfway, count, return."""

    def run_step(task: str, previous: str) -> str:
        time.sleep(work_seconds / 2)  # real-sleep-ok: simulated work in the child
        killer.maybe_kill("inside-step", task, name)
        time.sleep(work_seconds / 2)  # real-sleep-ok: simulated work in the child
        gate.enter()
        counts.add(task, name)
        return step_output(previous, name)

    run_step.__name__ = f"step_{name}"
    return run_step


def fault_hook(killer: Killer, gate: CountsGate) -> Callable[[str, str, int, str], None]:
    """Kills at the hook points; releases a step's gate once its commit is done."""

    def hook(point: str, task: str, seq: int, name: str) -> None:
        if point == "before_step":
            killer.maybe_kill("before-step", task, name)
        elif point == "after_step":
            killer.maybe_kill("after-step", task, name)  # still holding: nobody is mid-commit
            gate.leave_if_held()
        elif point == "after_task":
            killer.maybe_kill("after-task", task, None)

    return hook


def build_app(options: argparse.Namespace) -> tuple[Cairn, TaskDef[..., dict[str, Any]]]:
    """The app and its registered task, wired to this run's kill point."""
    app = Cairn(str(options.store))
    gate = CountsGate()
    marker = options.marker or Path(f"{options.store}.killed")
    killer = Killer(options.kill_at, marker, gate)
    counts = CountsFile(options.counts)
    work = options.work_ms / 1000
    steps = {name: make_step(name, work, killer, gate, counts) for name in STEPS}
    set_fault_hook(app, fault_hook(killer, gate))

    @app.task(name="pipeline")
    def pipeline(ctx: Context, n: int) -> dict[str, Any]:
        recorded_now = ctx.now()
        recorded_uuid = str(ctx.uuid())
        value = first_value(n, recorded_uuid, recorded_now)
        outputs = []
        for name in STEPS:
            value = ctx.step(name, steps[name], ctx.task_id, value)
            outputs.append(value)
        return {"n": n, "now": recorded_now, "uuid": recorded_uuid, "outputs": outputs}

    return app, pipeline


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True, help="SQLite file of the batch")
    parser.add_argument("--counts", type=Path, required=True, help="file of step count lines")
    parser.add_argument("--tasks", type=int, default=8, help="tasks in the batch")
    parser.add_argument("--concurrency", type=int, default=1, help="worker threads")
    parser.add_argument("--work-ms", type=float, default=4.0, help="simulated work per step")
    parser.add_argument(
        "--kill-at", type=KillPoint.parse, default=KillPoint("none"), help="where to SIGKILL"
    )
    parser.add_argument("--marker", type=Path, default=None, help="fire-once marker file")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    app, pipeline = build_app(options)
    with app:
        items = [{"n": n} for n in range(options.tasks)]
        report = app.run_batch(
            BATCH, pipeline, items, concurrency=options.concurrency, progress=False
        )
    summary = {
        "pid": os.getpid(),
        "ok": report.ok,
        "total": report.total,
        "skipped": report.skipped,
        "ran": report.ran,
        "resumed": report.resumed,
        "counts": report.counts,
    }
    sys.stdout.write(json.dumps(summary) + "\n")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
