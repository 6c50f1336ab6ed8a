"""The demo's live step count: lines off a terminal, a bar on one."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from cairn.demo.batch import StepLog
from cairn.demo.live import StepProgress, watching
from cairn.testing.servers import wait_until


def _plain_console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=False, width=100), out


def test_off_a_terminal_each_new_count_is_a_plain_line() -> None:
    """With no interval to wait, each changed count is a line; a count that did
    not change is not repeated."""
    console, out = _plain_console()
    with StepProgress(console, "run 1", 180, interval=0.0) as progress:
        for finished in (3, 3, 40):
            progress.update(finished)
    assert out.getvalue().splitlines() == [
        "  run 1: 3/180 steps finished",
        "  run 1: 40/180 steps finished",
    ]


def test_off_a_terminal_lines_wait_for_the_interval() -> None:
    """Within the interval after the start, no line is written (a log gets a
    line every few seconds, not one per poll)."""
    console, out = _plain_console()
    with StepProgress(console, "run 2", 180, interval=3600.0) as progress:
        progress.update(12)
    assert out.getvalue() == ""


def test_on_a_terminal_a_bar_shows_the_count(tmp_path: Path) -> None:
    """On a terminal the count is a bar, fed from the step log by ``watching``."""
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    log = StepLog(tmp_path / "step-runs.log")
    for n in range(5):
        log.record(f"batch/app-{n:02d}", "fetch")
    with StepProgress(console, "run 2", 30) as progress, watching(log, progress):
        shown = wait_until(lambda: "5/30" in out.getvalue(), timeout=30)
    assert shown, out.getvalue()
