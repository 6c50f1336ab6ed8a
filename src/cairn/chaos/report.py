"""What a chaos run found: kills, restarts, redundant work, losses, duplicates."""

from __future__ import annotations

import io
from dataclasses import asdict, dataclass, field
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from cairn.chaos.integrity import Loss


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One process of the chaos run.

    ``progress_seconds``: from its start until the store showed new progress
    (None: it showed none). ``delay``: how long after that it was killed.
    """

    number: int
    pid: int
    killed: bool
    exit_code: int | None
    progress_seconds: float | None
    delay: float | None
    seconds: float
    output_tail: str = ""


@dataclass(frozen=True, slots=True)
class ChaosReport:
    """The outcome of ``run_chaos``; ``ok`` is what the exit code says."""

    target: str
    store_url: str
    seed: int
    kills_requested: int
    runs: tuple[RunRecord, ...]
    lost: tuple[Loss, ...]
    duplicate_effects: dict[str, int]
    redundant_steps: int
    op_recalls: int
    effects: int
    # Tasks in the store at the end (the built-in batch may have been grown).
    tasks: int
    incomplete: tuple[str, ...]
    unsettled_operations: tuple[str, ...]
    wall_clock: float
    notes: tuple[str, ...] = field(default=())

    @property
    def kills(self) -> int:
        return sum(run.killed for run in self.runs)

    @property
    def restarts(self) -> tuple[RunRecord, ...]:
        """Every run started after a kill."""
        return self.runs[1:] if self.runs and self.runs[0].killed else ()

    @property
    def restarts_ok(self) -> int:
        """Restarts that took the work further: they recorded new progress, or
        finished the batch."""
        return sum(_restart_ok(run) for run in self.restarts)

    @property
    def restart_success_rate(self) -> float:
        return self.restarts_ok / len(self.restarts) if self.restarts else 1.0

    @property
    def crashed_runs(self) -> tuple[RunRecord, ...]:
        """Runs that ended with an error of their own, not by a kill."""
        return tuple(run for run in self.runs if not run.killed and run.exit_code != 0)

    @property
    def ok(self) -> bool:
        """No loss, no duplicate, no run that failed by itself, every task
        completed, every restart went on."""
        return not (
            self.crashed_runs
            or self.lost
            or self.duplicate_effects
            or self.incomplete
            or self.unsettled_operations
            or self.restarts_ok < len(self.restarts)
        )

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``--json``."""
        data = asdict(self)
        data.update(
            crashed_runs=[run.number for run in self.crashed_runs],
            kills=self.kills,
            restarts=len(self.restarts),
            restarts_ok=self.restarts_ok,
            restart_success_rate=self.restart_success_rate,
            ok=self.ok,
        )
        return data

    def table(self, width: int = 100) -> str:
        """The summary as plain text."""
        buffer = io.StringIO()
        console = Console(file=buffer, width=width, color_system=None, force_terminal=False)
        console.print(_summary(self))
        for problem in _problems(self):
            console.print(problem, soft_wrap=True)
        return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()) + "\n"


def _restart_ok(run: RunRecord) -> bool:
    return run.progress_seconds is not None or (not run.killed and run.exit_code == 0)


def _summary(report: ChaosReport) -> Table:
    verdict = "ok" if report.ok else "FAILED"
    table = Table(
        title=f"cairn chaos: {report.target} (seed {report.seed}): {verdict}",
        title_justify="left",
        box=box.SIMPLE,
        show_header=False,
    )
    table.add_column("what")
    table.add_column("value", justify="right")
    restarts = len(report.restarts)
    progress = [r.progress_seconds for r in report.restarts if r.progress_seconds is not None]
    rows = [
        ("store", report.store_url),
        ("kills", f"{report.kills} of {report.kills_requested}"),
        (
            "restart success",
            f"{report.restarts_ok}/{restarts} ({report.restart_success_rate:.0%})",
        ),
        ("slowest restart to progress", f"{max(progress):.2f} s" if progress else "-"),
        ("redundant step runs", str(report.redundant_steps)),
        ("operation re-claims", str(report.op_recalls)),
        ("tasks", str(report.tasks)),
        ("outside effects", str(report.effects)),
        ("duplicate effects", str(sum(report.duplicate_effects.values()))),
        ("lost steps", str(len(report.lost))),
        ("runs that failed by themselves", str(len(report.crashed_runs))),
        ("tasks not completed", str(len(report.incomplete))),
        ("operations unsettled", str(len(report.unsettled_operations))),
        ("wall-clock", f"{report.wall_clock:.1f} s"),
    ]
    for what, value in rows:
        table.add_row(what, value)
    return table


def _problems(report: ChaosReport, limit: int = 10) -> list[str]:
    lines = [f"note: {note}" for note in report.notes]
    lines += [
        f"lost: task {loss.task_id!r} #{loss.seq} {loss.name!r}: {loss.why}"
        for loss in report.lost[:limit]
    ]
    lines += [
        f"duplicate: {key!r} x{n}" for key, n in list(report.duplicate_effects.items())[:limit]
    ]
    lines += [f"not completed: {task_id}" for task_id in report.incomplete[:limit]]
    lines += [f"unsettled operation: {key}" for key in report.unsettled_operations[:limit]]
    for run in report.crashed_runs:
        lines.append(f"run {run.number} (pid {run.pid}) failed with exit code {run.exit_code}:")
        lines += [f"  {line}" for line in run.output_tail.strip().splitlines()[-5:]]
    for run in report.restarts:
        if not _restart_ok(run) and run not in report.crashed_runs:
            lines.append(f"run {run.number} (pid {run.pid}) made no progress after the restart")
    return lines
