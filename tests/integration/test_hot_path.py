"""The hot path stays short: the files of cairn a step passes through, traced.

A reader following one ``ctx.step`` should find it in a handful of files, and so
should the profiler: each switch between modules is a call the step pays for.
``sys.setprofile`` records every Python function entered while one step runs
(C functions, such as the clock read or the SQLite driver, have no Python frame).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import cairn
from cairn import Cairn, Context

PACKAGE = Path(cairn.__file__).parent

# What one step's first run may touch: the context hands the call to the step
# machine, TaskRun writes the record through the store's group-commit queue
# (alone, it goes straight on), the backend commits it, with its two times
# written as text by the clock module (cairn.clock.to_iso: one call either way).
FIRST_RUN = {
    "context.py",
    "engine/steps.py",
    "engine/run.py",
    "store/groupcommit.py",
    "store/sqlite.py",
    "clock.py",
}
# A replay reads the record already loaded with the history: no store at all.
REPLAY = {"context.py", "engine/steps.py", "engine/run.py"}


def files_entered(action: Callable[[], Any]) -> set[str]:
    """The files of cairn (relative to the package) whose functions ``action``
    enters, in this thread."""
    seen: set[str] = set()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            path = Path(frame.f_code.co_filename)
            if path.is_relative_to(PACKAGE):
                seen.add(path.relative_to(PACKAGE).as_posix())

    sys.setprofile(profile)
    try:
        action()
    finally:
        sys.setprofile(None)
    return seen


def test_a_first_run_step_on_sqlite_visits_six_files(tmp_path: Path) -> None:
    """A step run for the first time (an int result, on SQLite with the default
    blob store beside it) enters only the context, the step machine, TaskRun,
    the group-commit queue, the SQLite backend and the clock's text for times."""
    app = Cairn(f"sqlite:///{tmp_path / 'c.db'}")
    traced: list[set[str]] = []

    @app.task
    def one_step(ctx: Context) -> int:
        traced.append(files_entered(lambda: ctx.step("add", lambda: 41 + 1)))
        return 0

    with app:
        app.run(one_step)
    assert traced[0] <= FIRST_RUN, sorted(traced[0] - FIRST_RUN)
    assert len(traced[0]) <= 6


def test_a_replayed_step_visits_three_files_and_no_store(tmp_path: Path) -> None:
    """A step replayed from the record (the task was interrupted after it)
    returns its recorded value through three files, and reads nothing from the
    store: its history was loaded when the task was claimed."""
    url = f"sqlite:///{tmp_path / 'c.db'}"
    traced: list[set[str]] = []
    calls: list[int] = []

    def add() -> int:
        calls.append(1)
        return 42

    def build(interrupt: bool) -> Cairn:
        app = Cairn(url)

        @app.task(name="twice")
        def twice(ctx: Context) -> int:
            if interrupt:
                ctx.step("add", add)
                raise KeyboardInterrupt  # the process is stopped here
            traced.append(files_entered(lambda: ctx.step("add", add)))
            return 0

        return app

    first = build(interrupt=True)
    with pytest.raises(KeyboardInterrupt):
        first.run(first.registered("twice"))
    first.close()
    with build(interrupt=False) as again:
        again.run(again.registered("twice"))
    assert calls == [1]  # the second run replayed the step, it did not call it
    assert traced[0] <= REPLAY, sorted(traced[0] - REPLAY)
    assert len(traced[0]) <= 3
