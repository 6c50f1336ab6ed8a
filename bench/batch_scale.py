"""Does a batch scale? Memory stays flat with its size; resuming ignores finished tasks.

(a) Memory: a fresh child process runs ``run_batch`` over N one-step tasks whose
    items come from a generator, and reports its peak RSS. The 10,000-task batch
    is compared with a 1,000-task one measured the same way in the same run:
    flat means a ratio near 1, not 10.
(b) Resume: batch A holds 10,000 finished tasks, batch B 100 (each in its own
    file). Ten new items are enqueued into each, then ``run_batch`` is timed: it
    runs only those ten. A and B alternate for several runs; flat means the
    ratio of the medians A / B is near 1.

    .venv/bin/python -m bench.batch_scale [--tasks 10000] [--runs 11]
        [--concurrency 4] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench._stats import filesystem_of, fmt_ratio, median, ratio, spread, table
from cairn import Cairn, Context, TaskDef

BATCH = "scale"
NEW_PER_RESUME = 10
PROJECT_ROOT = Path(__file__).resolve().parent.parent


# -- the workload ---------------------------------------------------------------------------
def double(n: int) -> int:
    return 2 * n


def item(ctx: Context, n: int) -> int:
    """One trivial task: a single checkpointed step."""
    return ctx.step("double", double, n)


def open_app(path: Path) -> tuple[Cairn, TaskDef[[int], int]]:
    app = Cairn(f"sqlite:///{path}")
    return app, app.task(name="item")(item)


def items(start: int, count: int) -> Iterator[dict[str, int]]:
    """A generator, so the batch's items never sit in memory as a list."""
    return ({"n": n} for n in range(start, start + count))


# -- memory, measured in a child process --------------------------------------------------------
def rss_now_kb() -> int:
    """This process's resident set size now, in KiB (its peak where /proc is missing)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return peak_rss_kb()
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return peak_rss_kb()


def open_fds() -> int:
    """File descriptors open in this process (-1 where /proc is missing): each
    SQLite connection holds some, so a leak of connections shows here."""
    try:
        return len(list(Path("/proc/self/fd").iterdir()))
    except OSError:
        return -1


def peak_rss_kb() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak  # bytes on macOS


def child_batch(db: Path, tasks: int, concurrency: int) -> None:
    """Run one batch of ``tasks`` in this (fresh) process and print what it cost."""
    app, task = open_app(db)
    _ = app.store  # opened before the baseline, so the baseline includes SQLite
    before = rss_now_kb()
    start = time.perf_counter()
    report = app.run_batch(BATCH, task, items(0, tasks), concurrency=concurrency, progress=False)
    seconds = time.perf_counter() - start
    fds = open_fds()
    app.close()
    if report.completed != tasks:
        raise SystemExit(f"expected {tasks} completed tasks, got {report.counts}")
    found = {"before_kb": before, "peak_kb": peak_rss_kb(), "seconds": seconds, "fds": fds}
    print(json.dumps(found))


@dataclass(frozen=True, slots=True)
class BatchMemory:
    tasks: int
    seconds: float
    before_kb: int
    peak_kb: int
    fds: int  # open at the end of the batch, before app.close()

    @property
    def growth_kb(self) -> int:
        return self.peak_kb - self.before_kb


def measure_batch(db: Path, tasks: int, concurrency: int) -> BatchMemory:
    command = [
        sys.executable,
        "-m",
        "bench.batch_scale",
        "--child-batch",
        str(tasks),
        "--db",
        str(db),
        "--concurrency",
        str(concurrency),
    ]
    done = subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"child batch of {tasks} failed:\n{done.stderr}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return BatchMemory(tasks, found["seconds"], found["before_kb"], found["peak_kb"], found["fds"])


def memory_report(results: Sequence[BatchMemory]) -> str:
    rows = [
        [
            f"{r.tasks:,}",
            f"{r.seconds:.1f}",
            f"{r.tasks / r.seconds:,.0f}",
            f"{r.before_kb / 1024:.1f}",
            f"{r.peak_kb / 1024:.1f}",
            f"{r.growth_kb / 1024:.1f}",
            str(r.fds),
        ]
        for r in results
    ]
    headers = [
        "tasks",
        "seconds",
        "tasks/s",
        "RSS before MiB",
        "peak RSS MiB",
        "growth MiB",
        "open fds",
    ]
    small, large = results[-2], results[-1]
    times = large.tasks / small.tasks
    return (
        "(a) memory: one child process per batch; items from a generator\n"
        f"{table(headers, rows)}\n"
        f"peak RSS {large.tasks:,} / {small.tasks:,} tasks = "
        f"{fmt_ratio(ratio(large.peak_kb, small.peak_kb))} "
        f"(flat is ~1.00x; memory per task would make it grow with the {times:.0f}x tasks)\n"
        f"growth above the RSS before run_batch: {large.growth_kb / 1024:.1f} MiB vs "
        f"{small.growth_kb / 1024:.1f} MiB = {fmt_ratio(ratio(large.growth_kb, small.growth_kb))}\n"
    )


# -- resume time ---------------------------------------------------------------------------------
@dataclass
class ResumeSeries:
    label: str
    finished: int
    app: Cairn
    task: TaskDef[[int], int]
    next_n: int
    millis: list[float]


def time_resume(series: ResumeSeries) -> None:
    """Enqueue ten new items, then time the run_batch that runs only them."""
    series.app.enqueue(BATCH, series.task, items(series.next_n, NEW_PER_RESUME))
    series.next_n += NEW_PER_RESUME
    start = time.perf_counter()
    report = series.app.run_batch(BATCH, series.task, progress=False)
    series.millis.append((time.perf_counter() - start) * 1000)
    if report.ran != NEW_PER_RESUME:
        raise SystemExit(f"batch {series.label}: expected {NEW_PER_RESUME} to run: {report}")


def resume_report(a: ResumeSeries, b: ResumeSeries, runs: int) -> str:
    rows = [
        [
            s.label,
            f"{s.finished:,}",
            str(NEW_PER_RESUME),
            f"{median(s.millis):.1f}",
            spread(s.millis),
        ]
        for s in (a, b)
    ]
    headers = ["batch", "finished before", "pending", "run_batch ms", "ms min..max"]
    paired = median([ratio(x, y) for x, y in zip(a.millis, b.millis, strict=True)])
    return (
        f"(b) resume: run_batch with {NEW_PER_RESUME} pending tasks, {runs} runs "
        "alternating A and B (each run adds its 10 to the finished)\n"
        f"{table(headers, rows)}\n"
        f"resume time A / B = {fmt_ratio(ratio(median(a.millis), median(b.millis)))} "
        f"(paired median {fmt_ratio(paired)}; flat is ~1.00x, "
        f"growing with finished tasks would approach {a.finished / b.finished:.0f}x)\n"
    )


def measure_resume(db_a: Path, finished_a: int, db_b: Path, finished_b: int, runs: int) -> str:
    app_a, task_a = open_app(db_a)
    app_b, task_b = open_app(db_b)
    a = ResumeSeries("A", finished_a, app_a, task_a, finished_a, [])
    b = ResumeSeries("B", finished_b, app_b, task_b, finished_b, [])
    try:
        for series in (a, b):
            _ = series.app.store  # opening the file is not part of resuming
        for _run in range(runs):
            time_resume(a)
            time_resume(b)
    finally:
        app_a.close()
        app_b.close()
    return resume_report(a, b, runs)


# -- the program -----------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.batch_scale",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--tasks", type=int, default=10_000, help="the large batch (10,000)")
    parser.add_argument("--runs", type=int, default=11, help="resume timings per batch (11)")
    parser.add_argument("--concurrency", type=int, default=4, help="run_batch threads (4)")
    parser.add_argument("--dir", type=Path, default=None, help="where the temp files go")
    parser.add_argument("--child-batch", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--db", type=Path, default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child_batch is not None:
        child_batch(args.db, args.child_batch, args.concurrency)
        return
    large = args.tasks
    small, finished_b = max(1, large // 10), max(1, large // 100)
    with tempfile.TemporaryDirectory(prefix="cairn-bench-", dir=args.dir) as name:
        workdir = Path(name)
        print(
            f"files on {filesystem_of(workdir)}; concurrency={args.concurrency}; "
            "every task is one trivial step\n"
        )
        # The 10,000 batch's file becomes batch A and the 100 batch's file batch B.
        sizes = [(finished_b, "b.db"), (small, "small.db"), (large, "a.db")]
        memory = [measure_batch(workdir / db, n, args.concurrency) for n, db in sizes]
        print(memory_report(memory))
        print(measure_resume(workdir / "a.db", large, workdir / "b.db", finished_b, args.runs))


if __name__ == "__main__":
    main()
