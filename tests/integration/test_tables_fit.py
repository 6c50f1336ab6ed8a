"""Tables fit a 100-column terminal and never split a timestamp.

On a terminal, long ids are cut in the middle with "…" (their head and tail
kept), free text at the end; if the rows are still too wide, the last columns
are left out and named on stderr. ``--wide`` (tasks, show) and piped output
show every value whole.
"""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner, Result

from cairn import Cairn, Context
from cairn.cli import app as cli_app
from cairn.clock import FakeClock

TERMINAL = {"TTY_COMPATIBLE": "1", "COLUMNS": "100", "NO_COLOR": "1"}
TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ")
# An id as long as a schedule's firing, in a batch name as long as a real one.
BATCH = "nightly-revenue-report-2026-11"
LONG_KEY = "schedule:nightly_revenue/2026-11-27T19:30:00Z"


def _store(tmp_path: Path) -> str:
    """A store with one completed task whose id is long, and one operation."""
    url = f"sqlite:///{tmp_path / 'cairn.db'}"
    with Cairn(url, clock=FakeClock()) as app:

        @app.task
        def report(ctx: Context, day: str) -> str:
            return str(ctx.once(f"daily-report/{day[-20:-10]}/nightly-revenue", lambda key: "ok"))

        app.run_batch(BATCH, report, [{"day": LONG_KEY}], key=lambda item: item["day"])
    return url


def _on_terminal(*args: str) -> Result:
    return CliRunner().invoke(cli_app, list(args), env=TERMINAL)


def _unstyled(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def _lines(result: Result) -> list[str]:
    assert result.exit_code == 0, result.output
    return [_unstyled(line) for line in result.stdout.splitlines()]


def test_tasks_cut_a_long_id_in_the_middle_and_keep_both_times_whole(tmp_path: Path) -> None:
    """``cairn tasks`` at 100 columns: every line fits, the id keeps its head
    and tail around "…", and the row carries both its times whole; ``--wide``
    shows the id whole."""
    url = _store(tmp_path)
    lines = _lines(_on_terminal("tasks", "--store", url))
    assert max(len(line) for line in lines) <= 100
    row = next(line for line in lines if line.startswith(BATCH[:8]))
    task_id = row.split()[0]
    assert "…" in task_id
    head, tail = task_id.split("…")
    full = f"{BATCH}/{LONG_KEY}"
    assert full.startswith(head)
    assert full.endswith(tail)
    assert len(TIME.findall(row)) == 2
    wide = _unstyled(_on_terminal("tasks", "--store", url, "--wide").stdout)
    assert full in wide


def test_a_table_too_wide_even_with_ids_cut_leaves_out_its_last_columns(
    tmp_path: Path,
) -> None:
    """``cairn batches`` at 100 columns (nine columns of counts and names, two
    times) leaves out its last columns whole rather than let the terminal split
    a time, and says which on stderr; piped, every column is there."""
    url = _store(tmp_path)
    result = _on_terminal("batches", "--store", url)
    lines = _lines(result)
    assert max(len(line) for line in lines) <= 100
    for line in lines:
        # A time on a line is whole: no line ends in part of one.
        assert not re.search(r"\d{4}-\d\d-\d\d \d?\d?:?\d?$", line.rstrip()), line
    stderr = " ".join(result.stderr.split())
    assert "column(s) left out to fit 100 columns: " in stderr
    assert "piped output (| cat), which is never cut" in stderr
    left_out = stderr.split("to fit 100 columns: ", 1)[1].split(". ", 1)[0].split(", ")
    header = lines[0]
    assert left_out
    assert all(name not in header for name in left_out)
    piped = CliRunner().invoke(cli_app, ["batches", "--store", url])
    assert all(name in piped.stdout.splitlines()[0] for name in left_out)
    assert len(TIME.findall(piped.stdout)) == 2


def test_operations_fit_with_their_times_whole(tmp_path: Path) -> None:
    """``cairn ops`` at 100 columns: every line fits and every time shown is
    whole (each row shows as many times as the header names time columns)."""
    url = _store(tmp_path)
    lines = _lines(_on_terminal("ops", "--store", url))
    assert max(len(line) for line in lines) <= 100
    header = lines[0]
    time_columns = sum(name in header for name in ("first claimed", "completed"))
    row = next(line for line in lines if "…" in line.split()[0])
    assert len(TIME.findall(row)) == time_columns >= 1
