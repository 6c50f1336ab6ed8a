"""Off a terminal, run_batch writes plain progress lines on stderr with no
logging set up: a start line, lines at an interval (done, failed, rate, ETA),
an end line."""

from __future__ import annotations

import io

import pytest

from cairn import Cairn, Context
from cairn.clock import FakeClock
from cairn.engine.execute import Outcome
from cairn.progress import LineProgress, choose_progress


def test_run_batch_off_a_terminal_writes_lines(
    app: Cairn, clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    """stderr is not a terminal under pytest: the start and end lines are there
    (the 10-second interval keeps a quick batch to those two)."""
    assert isinstance(choose_progress(None), LineProgress)

    @app.task(name="half")
    def half(ctx: Context, n: int) -> int:
        if n == 1:
            raise ValueError("odd")
        return n // 2

    app.run_batch("halves-1", half, [{"n": n} for n in range(3)])
    lines = capsys.readouterr().err.splitlines()
    assert "cairn: batch halves-1: 3 tasks, 0 already finished" in lines
    assert any(
        line.startswith("cairn: batch halves-1: this run took")
        and line.endswith("for 3 task(s); now 2 completed, 1 failed")
        for line in lines
    )


def test_a_line_at_each_interval() -> None:
    """With no interval, every finished task gives a line with the counts, the
    rate and an ETA while tasks are left."""
    out = io.StringIO()
    progress = LineProgress(interval=0.0, stream=out)
    progress.start("b", total=3, finished=0)
    for n, status in enumerate(["completed", "failed", "completed"]):
        progress.task_started(f"b/{n}")
        progress.task_finished(Outcome(f"b/{n}", status))  # type: ignore[arg-type]
    lines = out.getvalue().splitlines()
    assert lines[1].startswith("cairn: batch b: 1/3 done, 0 failed, 0 running, ")
    assert "tasks/s, ETA " in lines[1]
    assert lines[2].startswith("cairn: batch b: 1/3 done, 1 failed, 0 running, ")
    assert lines[3].startswith("cairn: batch b: 2/3 done, 1 failed")
    assert "ETA" not in lines[3] or "ETA 0s" in lines[3]
