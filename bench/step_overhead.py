"""What one checkpointed step costs, against the raw SQLite commit it cannot avoid.

A task of N trivial steps (``ctx.step("s", trivial, i)``) is timed against a loop
of N raw ``INSERT`` statements in autocommit mode (each its own commit) into a
table shaped like cairn's step rows, on the same kind of file, in WAL mode with
the same ``synchronous`` setting. Raw and cairn runs alternate, each on a fresh
file, and the ratio is taken per pair, then the median over pairs is printed.

Also measured: replaying the same N steps after a crash, where every step
returns its recorded output and only the task's claim and end are committed.

    .venv/bin/python -m bench.step_overhead [--runs 7] [--steps 2000]
        [--synchronous NORMAL|FULL | --both] [--profile] [--no-replay] [--dir DIR]

Targets: a first-run step costs at most 1.3x the raw commit (wall,
whole app.run); a replayed step at most 0.15x (the loop inside the task).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import sqlite3
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import get_args

from bench._stats import filesystem_of, fmt_ratio, median, ratio, spread, table
from cairn import Cairn, Context, TaskDef
from cairn.store.sqlite import Synchronous
from cairn.testing import FaultHook, set_fault_hook

TARGET = 1.3
REPLAY_TARGET = 0.15
TASK_ID = "bench/overhead"

_RAW_SCHEMA = """
CREATE TABLE steps (
    task_id TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    name    TEXT NOT NULL,
    output  TEXT,
    PRIMARY KEY (task_id, seq)
) WITHOUT ROWID
"""


# -- timing ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Span:
    """Wall seconds, and this thread's CPU seconds: CPU time is what other
    processes on a busy shared machine disturb least; wall time also counts
    waits (fsync with synchronous=FULL, locks, being descheduled)."""

    wall: float
    cpu: float


def _mark() -> tuple[float, float]:
    return time.perf_counter(), time.thread_time()


def _since(mark: tuple[float, float]) -> Span:
    return Span(time.perf_counter() - mark[0], time.thread_time() - mark[1])


# -- the floor: raw sqlite3 ----------------------------------------------------------------
def raw_commits(path: Path, synchronous: Synchronous, steps: int) -> Span:
    """Time ``steps`` single-row INSERTs, each committed on its own."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute(_RAW_SCHEMA)  # keyed like cairn's steps table (WITHOUT ROWID)
        insert = "INSERT INTO steps (task_id, seq, name, output) VALUES (?, ?, ?, ?)"
        mark = _mark()
        for i in range(steps):
            conn.execute(insert, (TASK_ID, i + 1, "s", str(i)))
        return _since(mark)
    finally:
        conn.close()


# -- cairn ---------------------------------------------------------------------------------
def trivial(i: int) -> int:
    return i


def overhead(ctx: Context, n: int) -> list[float]:
    """The benchmark task: ``n`` trivial steps; returns its loop's [wall, cpu] seconds."""
    mark = _mark()
    for i in range(n):
        ctx.step("s", trivial, i)
    span = _since(mark)
    return [span.wall, span.cpu]


def open_app(path: Path, synchronous: Synchronous) -> tuple[Cairn, TaskDef[[int], list[float]]]:
    app = Cairn(f"sqlite:///{path}", synchronous=synchronous)
    task = app.task(name="overhead")(overhead)
    # Open the store (schema, connection) before timing, as the raw floor
    # creates its table before timing: both then measure only the work.
    _ = app.store
    return app, task


@dataclass(frozen=True, slots=True)
class CairnTiming:
    whole: Span  # the whole app.run: create and claim the task, the steps, finish
    loop: Span  # the step loop alone, timed inside the task


def cairn_run(path: Path, synchronous: Synchronous, steps: int) -> CairnTiming:
    app, task = open_app(path, synchronous)
    try:
        mark = _mark()
        loop_wall, loop_cpu = app.run(task, task_id=TASK_ID, n=steps)
        return CairnTiming(_since(mark), Span(loop_wall, loop_cpu))
    finally:
        app.close()


class _Crash(BaseException):
    """Stands in for a kill: a BaseException passes through cairn untouched."""


def _crash_after_last_step(steps: int) -> FaultHook:
    def hook(point: str, task_id: str, seq: int, name: str) -> None:
        if point == "after_step" and seq == steps:
            raise _Crash

    return hook


def replay_run(path: Path, synchronous: Synchronous, steps: int) -> CairnTiming:
    """Record every step, stop before the task's end, then time the resumed run.

    The first run stops right after its last step commits, leaving the task
    "running" under this very process, which cairn (rightly) never takes over
    from itself. Releasing it back to pending is what reclaiming a dead
    owner's task amounts to; the resumed run then replays all ``steps``.
    """
    app, task = open_app(path, synchronous)
    set_fault_hook(app, _crash_after_last_step(steps))
    with contextlib.suppress(_Crash):
        app.run(task, task_id=TASK_ID, n=steps)
    record = app.store.get_task(TASK_ID)
    assert record is not None
    assert record.status == "running"
    assert len(app.store.load_history(TASK_ID)) == steps
    app.store.release_task(TASK_ID, record.fence, app.clock.now())
    app.close()
    return cairn_run(path, synchronous, steps)


# -- running and reporting ------------------------------------------------------------------
@dataclass
class Series:
    """Per-run microseconds per step (or per raw commit) for one measure."""

    label: str
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def add(self, span: Span, steps: int) -> None:
        self.wall.append(span.wall * 1e6 / steps)
        self.cpu.append(span.cpu * 1e6 / steps)


@dataclass
class ModeResult:
    synchronous: Synchronous
    raw: Series = field(default_factory=lambda: Series("raw INSERT+COMMIT (the floor)"))
    whole: Series = field(default_factory=lambda: Series("cairn step, whole app.run"))
    loop: Series = field(default_factory=lambda: Series("cairn step, loop inside task"))
    replay_whole: Series = field(default_factory=lambda: Series("replayed step, whole app.run"))
    replay_loop: Series = field(default_factory=lambda: Series("replayed step, loop in task"))

    def measures(self) -> list[Series]:
        every = [self.raw, self.whole, self.loop, self.replay_whole, self.replay_loop]
        return [series for series in every if series.wall]


def measure_mode(
    workdir: Path, synchronous: Synchronous, runs: int, steps: int, replay: bool
) -> ModeResult:
    result = ModeResult(synchronous)
    for run in range(runs):
        # Interleaved, each on a fresh file, so drift on a shared machine
        # touches the floor and cairn alike.
        name = f"{synchronous}-{run}.db"
        result.raw.add(raw_commits(workdir / f"raw-{name}", synchronous, steps), steps)
        timing = cairn_run(workdir / f"cairn-{name}", synchronous, steps)
        result.whole.add(timing.whole, steps)
        result.loop.add(timing.loop, steps)
        if replay:
            timing = replay_run(workdir / f"replay-{name}", synchronous, steps)
            result.replay_whole.add(timing.whole, steps)
            result.replay_loop.add(timing.loop, steps)
    return result


def paired_ratio(values: Sequence[float], floor: Sequence[float]) -> float:
    """Median over runs of each run's value divided by the same run's floor."""
    return median([ratio(v, f) for v, f in zip(values, floor, strict=True)])


def report(result: ModeResult, runs: int, steps: int) -> str:
    raw = result.raw
    rows = [
        [
            s.label,
            f"{median(s.wall):.1f}",
            spread(s.wall),
            fmt_ratio(paired_ratio(s.wall, raw.wall)),
            f"{median(s.cpu):.1f}",
            fmt_ratio(paired_ratio(s.cpu, raw.cpu)),
        ]
        for s in result.measures()
    ]
    headers = ["measure", "wall us", "wall min..max", "ratio", "cpu us", "cpu ratio"]
    step_ratio = paired_ratio(result.whole.wall, raw.wall)
    verdict = "met" if step_ratio <= TARGET else "NOT met"
    replayed = ""
    if result.replay_loop.wall:
        replay_ratio = paired_ratio(result.replay_loop.wall, raw.wall)
        replay_verdict = "met" if replay_ratio <= REPLAY_TARGET else "NOT met"
        replayed = (
            f"replayed step / raw commit (wall, loop in task) = {fmt_ratio(replay_ratio)}: "
            f"target <= {fmt_ratio(REPLAY_TARGET)} {replay_verdict}\n"
        )
    return (
        f"synchronous={result.synchronous}: {steps} steps, {runs} runs "
        "(medians; ratio = median over runs of cairn / the same run's floor)\n"
        f"{table(headers, rows)}\n"
        f"step / raw commit (wall, whole app.run) = {fmt_ratio(step_ratio)}: "
        f"target <= {fmt_ratio(TARGET)} {verdict}\n"
        f"{replayed}"
    )


# -- profiling -------------------------------------------------------------------------------
def profile_run(workdir: Path, synchronous: Synchronous, steps: int, top: int) -> str:
    """One cairn run under cProfile: where each step's microseconds go."""
    app, task = open_app(workdir / f"profile-{synchronous}.db", synchronous)
    profiler = cProfile.Profile()
    try:
        profiler.enable()
        app.run(task, task_id=TASK_ID, n=steps)
        profiler.disable()
    finally:
        app.close()
    profiler.create_stats()
    per_step = 1e6 / steps
    # cProfile's stats: label -> (primitive calls, calls, self s, inclusive s, callers)
    found = [
        _Profiled(_where(label), calls, self_s * per_step, incl_s * per_step)
        for label, (_, calls, self_s, incl_s, _callers) in profiler.stats.items()
    ]
    by_self = sorted(found, key=lambda p: p.self_us, reverse=True)[:top]
    by_incl = sorted(found, key=lambda p: p.incl_us, reverse=True)[:top]
    total = sum(p.self_us for p in found)
    return (
        f"cProfile of one cairn run, synchronous={synchronous} "
        f"({total:.1f} us/step under the profiler, which inflates Python-heavy code)\n"
        f"by self time:\n{_profile_table(by_self)}\n\n"
        f"by inclusive time:\n{_profile_table(by_incl)}\n"
    )


@dataclass(frozen=True, slots=True)
class _Profiled:
    where: str
    calls: int
    self_us: float  # per step, in the function's own code
    incl_us: float  # per step, including what it calls


def _profile_table(rows: Sequence[_Profiled]) -> str:
    headers = ["function", "calls", "self us/step", "incl us/step"]
    cells = [[p.where, str(p.calls), f"{p.self_us:.2f}", f"{p.incl_us:.2f}"] for p in rows]
    return table(headers, cells)


def _where(label: tuple[str, int, str]) -> str:
    file_name, line, name = label
    if file_name == "~":
        return name  # a builtin: cProfile names it like "<method 'execute' ...>"
    return f"{Path(file_name).name}:{line} {name}"


# -- the program -------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.step_overhead",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--runs", type=int, default=7, help="raw/cairn pairs (default 7)")
    parser.add_argument("--steps", type=int, default=2000, help="steps per task (default 2000)")
    parser.add_argument("--synchronous", choices=get_args(Synchronous), default="NORMAL")
    parser.add_argument("--both", action="store_true", help="run NORMAL and then FULL")
    parser.add_argument("--no-replay", action="store_true", help="skip the replay measure")
    parser.add_argument("--profile", action="store_true", help="also profile one cairn run")
    parser.add_argument("--top", type=int, default=15, help="profile rows to show")
    parser.add_argument("--dir", type=Path, default=None, help="where the temp files go")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    modes: list[Synchronous] = ["NORMAL", "FULL"] if args.both else [args.synchronous]
    with tempfile.TemporaryDirectory(prefix="cairn-bench-", dir=args.dir) as name:
        workdir = Path(name)
        print(f"files on {filesystem_of(workdir)}; times in microseconds (us) per step\n")
        for mode in modes:
            result = measure_mode(workdir, mode, args.runs, args.steps, not args.no_replay)
            print(report(result, args.runs, args.steps))
        if args.profile:
            print(profile_run(workdir, modes[0], args.steps, args.top))


if __name__ == "__main__":
    main()
