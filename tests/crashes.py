"""Helpers for tests that 'kill' a run in-process and resume it in a 'restarted' one.

A crash is simulated by raising ``Crash`` from a fault hook or a fake clock. The
restarted process is a new ``Cairn`` on the same store whose owner is on another
host, so it may take the crashed task once the caller moved the clock past its lease
(``PAST_LEASE``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest

from cairn import Cairn
from cairn.clock import FakeClock
from cairn.engine.owners import takeover_grace

LEASE = 10.0
# Far enough past a crashed run's lease that another owner may take its task:
# the lease, then the grace a taker still honours it for, then a second.
PAST_LEASE = LEASE + takeover_grace(timedelta(seconds=LEASE)).total_seconds() + 1
# An owner on another host: cairn cannot see whether it lives, only its lease can say.
ELSEWHERE = "elsewhere-00000000/4242/1/cafef00d"

FaultHook = Callable[[str, str, int, str], None]


class Crash(BaseException):
    """Stands for the process dying: cairn lets a BaseException through untouched."""


def crash_before(where: int | str) -> FaultHook:
    """A fault hook that 'kills' the run just before a step.

    ``where`` is the step's position in the task's history (an int) or its name (a str).
    """

    def hook(point: str, task_id: str, seq: int, name: str) -> None:
        if point == "before_step" and where in (seq, name):
            raise Crash(f"crash before {name} at {seq}")

    return hook


def sigkill_at(point: str, nth: int, marker: str) -> FaultHook:
    """A fault hook for a child process: it SIGKILLs its own process the
    ``nth`` time ``point`` is reached, once across runs (the ``marker`` file,
    created atomically, says it did)."""
    reached = [0]

    def hook(at: str, task_id: str, seq: int, name: str) -> None:
        if at != point:
            return
        reached[0] += 1
        if reached[0] != nth:
            return
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        os.kill(os.getpid(), signal.SIGKILL)

    return hook


ROOT = Path(__file__).parents[1]


def start_child(script: str, *arguments: str) -> subprocess.Popen[str]:
    """``python -c script arguments...`` in the repository's root (so the child
    imports ``tests`` as this process does), its output captured."""
    return subprocess.Popen(
        [sys.executable, "-c", script, *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def finish_child(process: subprocess.Popen[str], timeout: float) -> tuple[int, str, str]:
    """Its exit code (negative: the signal that killed it), its stripped
    stdout, and its stderr."""
    stdout, stderr = process.communicate(timeout=timeout)
    return process.returncode, stdout.strip(), stderr


class CrashingClock(FakeClock):
    """A fake clock that can 'kill' the process part-way through one sleep or retry wait."""

    def __init__(self) -> None:
        """A fake clock that crashes no sleep until ``crash_after`` is set."""
        super().__init__()
        self.crash_after: float | None = None

    def sleep(self, seconds: float) -> None:
        """Sleep ``seconds``, or only ``crash_after`` of them and raise ``Crash`` (once)."""
        if self.crash_after is not None and seconds > self.crash_after:
            self.slept.append(self.crash_after)
            self.advance(self.crash_after)
            self.crash_after = None
            raise Crash("crash mid-sleep")
        super().sleep(seconds)


def second_process(url: str, clock: FakeClock, **options: Any) -> Cairn:
    """A new app standing for the process that restarts after a crash.

    Owner identity is per process, so a second app in this process would see the
    crashed task as held by a live owner (itself) and refuse with TaskBusy. We
    give it an owner on another host, which may take the task once its lease
    expired: the caller advances the fake clock past the lease for that.
    ``options`` go to ``Cairn`` as they are (``task_retry=``, say).
    """
    other = Cairn(url, clock=clock, lease=LEASE, **options)
    other.owner = ELSEWHERE
    return other


@pytest.fixture
def url(store_url: str) -> str:
    """The test's store, once per backend (a SQLite file, a PostgreSQL database)."""
    return store_url


T = TypeVar("T")


def logged(calls: list[str], name: str, value: T) -> Callable[[], T]:
    """A step function that notes ``name`` in ``calls`` and returns ``value``."""

    def call() -> T:
        calls.append(name)
        return value

    return call
