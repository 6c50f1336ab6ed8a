"""cairn on PostgreSQL: what one durable step costs, and how workers scale.

(a) Step cost. A task of N trivial steps (``ctx.step("s", trivial, i)``), run
    with ``app.run``, against a loop of N raw psycopg INSERTs in autocommit mode
    (each its own commit) into a 4-column table keyed like cairn's step rows, in
    the same database over the same kind of connection. Raw and cairn runs
    alternate; the ratio is taken per pair, then the median over pairs is
    printed. Target: a step costs at most 1.3x the raw commit (the
    first build's target was 1.5x).
    For scale: a widely used peer was measured here at about 3.2 ms per step
    where a raw commit is about 0.35-0.4 ms (8-9x). ``--both`` also runs (a)
    with ``synchronous_commit=off`` set on the database: no commit then waits
    for its WAL flush, which leaves the round trip and the client's own code.
(b) Workers. One batch of T tasks x 5 trivial steps is drained by 1, 2 and 4
    ``cairn worker`` processes (each with ``--concurrency C``), each count on a
    fresh schema of the same database. The workers are started first and the
    batch is enqueued once all are up (its NOTIFY wakes them), so interpreter
    start-up is left out. Steps per second are taken from the store's own
    timestamps (first task started .. last task finished); the wall time from
    the enqueue until every task was seen completed is shown too.

Everything happens in a throwaway database (``cairn_bench_<pid>``), created on
the server at ``--url`` (default ``$CAIRN_TEST_POSTGRES_URL`` or the local
server) and dropped at the end.

    .venv/bin/python -m bench.postgres [--runs 7] [--steps 500] [--both]
        [--tasks 400] [--workers 1,2,4] [--concurrency 2] [--worker-runs 3]
        [--no-workers] [--url URL]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

from bench._stats import fmt_ratio, median, ratio, spread, table
from cairn import Cairn, Context, TaskDef
from cairn.store import admin

TARGET = 1.3
DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
PROJECT_ROOT = Path(__file__).resolve().parent.parent
BATCH = "bench"
WORKER_TIMEOUT_SECONDS = 600

# (a) runs in each mode on fresh connections. "durable" keeps the server's own
# setting (synchronous_commit=on by default: every commit waits for its WAL
# flush); "no-flush" sets synchronous_commit=off for the database, leaving the
# round trip and the client's code, which is where cairn's own cost shows.
MODES = ("durable", "no-flush")


def raw_schema(mode: str) -> str:
    """A table keyed like cairn's step rows, one per mode."""
    return f"""
CREATE TABLE raw_steps_{mode.replace("-", "_")} (
    task_id TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    name    TEXT NOT NULL,
    output  TEXT,
    PRIMARY KEY (task_id, seq)
)
"""


# -- timing --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Span:
    """Wall seconds, and this thread's CPU seconds. On PostgreSQL most of a
    commit is waiting for the server (and its WAL flush): wall time is the
    measure; CPU time shows what the client's own code costs."""

    wall: float
    cpu: float


def _mark() -> tuple[float, float]:
    return time.perf_counter(), time.thread_time()


def _since(mark: tuple[float, float]) -> Span:
    return Span(time.perf_counter() - mark[0], time.thread_time() - mark[1])


# -- the throwaway database ----------------------------------------------------------------
def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


@contextmanager
def throwaway_database(admin_url: str) -> Iterator[str]:
    """A new, empty database for this run; dropped (connections and all) after."""
    name = f"cairn_bench_{os.getpid()}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield with_database(admin_url, name)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def server_settings(url: str) -> str:
    """What makes a commit cost what it costs: a reader needs these to compare."""
    with psycopg.connect(url) as conn:
        found = [
            f"{name}={conn.execute(f'SHOW {name}').fetchone()[0]}"  # type: ignore[index]
            for name in ("server_version", "synchronous_commit", "fsync", "wal_sync_method")
        ]
    host = urlsplit(url).hostname or "local socket"
    return f"PostgreSQL at {host}: " + ", ".join(found)


# -- (a) the floor: raw psycopg commits ----------------------------------------------------
def raw_commits(url: str, mode: str, run: int, steps: int) -> Span:
    """Time ``steps`` single-row INSERTs, each committed on its own."""
    with psycopg.connect(url, autocommit=True) as conn:
        insert = (
            f"INSERT INTO raw_steps_{mode.replace('-', '_')} (task_id, seq, name, output) "
            "VALUES (%s, %s, %s, %s)"
        )
        task_id = f"raw/{run}"
        mark = _mark()
        for i in range(steps):
            conn.execute(insert, (task_id, i + 1, "s", str(i)))
        return _since(mark)


# -- (a) cairn -----------------------------------------------------------------------------
def trivial(i: int) -> int:
    return i


def overhead(ctx: Context, n: int) -> list[float]:
    """The benchmark task: ``n`` trivial steps; returns its loop's [wall, cpu] seconds."""
    mark = _mark()
    for i in range(n):
        ctx.step("s", trivial, i)
    span = _since(mark)
    return [span.wall, span.cpu]


@dataclass(frozen=True, slots=True)
class CairnTiming:
    whole: Span  # the whole app.run: create and claim the task, the steps, finish
    loop: Span  # the step loop alone, timed inside the task


def cairn_run(app: Cairn, task: TaskDef[[int], list[float]], run: int, steps: int) -> CairnTiming:
    mark = _mark()
    loop_wall, loop_cpu = app.run(task, task_id=f"overhead/{run}", n=steps)
    return CairnTiming(_since(mark), Span(loop_wall, loop_cpu))


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
class StepCost:
    raw: Series = field(default_factory=lambda: Series("raw INSERT+COMMIT (the floor)"))
    whole: Series = field(default_factory=lambda: Series("cairn step, whole app.run"))
    loop: Series = field(default_factory=lambda: Series("cairn step, loop inside task"))


@contextmanager
def commit_mode(url: str, mode: str) -> Iterator[None]:
    """Connections opened inside commit as ``mode`` says (see MODES)."""
    if mode == "durable":
        yield
        return
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT current_database()").fetchone()
        assert row is not None
        conn.execute(f"ALTER DATABASE {row[0]} SET synchronous_commit = off")
        try:
            yield
        finally:
            conn.execute(f"ALTER DATABASE {row[0]} RESET synchronous_commit")


def measure_step_cost(url: str, mode: str, runs: int, steps: int) -> StepCost:
    with commit_mode(url, mode):
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(raw_schema(mode))
        app = Cairn(f"{url}?schema=cairn_steps_{mode.replace('-', '_')}")
        task = app.task(name="overhead")(overhead)
        # Open the store (schema, pool) before timing, as the floor's table is
        # created before its timing: both then measure only the work.
        _ = app.store
        cost = StepCost()
        try:
            for run in range(runs):
                # Interleaved, so drift on a shared machine touches both alike.
                cost.raw.add(raw_commits(url, mode, run, steps), steps)
                timing = cairn_run(app, task, run, steps)
                cost.whole.add(timing.whole, steps)
                cost.loop.add(timing.loop, steps)
        finally:
            app.close()
    return cost


def paired_ratio(values: Sequence[float], floor: Sequence[float]) -> float:
    """Median over runs of each run's value divided by the same run's floor."""
    return median([ratio(v, f) for v, f in zip(values, floor, strict=True)])


def report_step_cost(cost: StepCost, mode: str, runs: int, steps: int) -> str:
    raw = cost.raw
    rows = [
        [
            s.label,
            f"{median(s.wall):.1f}",
            spread(s.wall),
            fmt_ratio(paired_ratio(s.wall, raw.wall)),
            f"{median(s.cpu):.1f}",
        ]
        for s in (cost.raw, cost.whole, cost.loop)
    ]
    headers = ["measure", "wall us", "wall min..max", "ratio", "cpu us"]
    step_ratio = paired_ratio(cost.whole.wall, raw.wall)
    verdict = "met" if step_ratio <= TARGET else "NOT met"
    if mode != "durable":
        verdict = "(the target is for durable commits)"
    return (
        f"(a) one step, {mode} commits: {steps} steps, {runs} runs "
        "(medians; ratio = median over runs of cairn / the same run's floor)\n"
        f"{table(headers, rows)}\n"
        f"step / raw commit (wall, whole app.run) = {fmt_ratio(step_ratio)}: "
        f"target <= {fmt_ratio(TARGET)} {verdict}\n"
    )


# -- (b) workers ---------------------------------------------------------------------------
# The app the worker subprocesses load: ``cairn worker bench.postgres:worker_app``.
worker_app = Cairn()


def noop(i: int) -> int:
    return i


def five_steps(ctx: Context, n: int) -> int:
    """A batch task: five trivial checkpointed steps."""
    for i in range(5):
        ctx.step(f"s{i + 1}", noop, n)
    return n


worker_app.task(name="bench_five_steps")(five_steps)


@dataclass(frozen=True, slots=True)
class Drain:
    """One batch drained by some worker processes."""

    processes: int
    work_seconds: float  # the store's first start .. last finish
    wall_seconds: float  # from the enqueue until the test saw every task completed


@dataclass(frozen=True, slots=True)
class WorkerProcess:
    process: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")


def start_worker(store_url: str, concurrency: int, log: Path) -> WorkerProcess:
    command = [
        sys.executable,
        "-c",
        "from cairn.cli import main; main()",
        "worker",
        "bench.postgres:worker_app",
        f"--concurrency={concurrency}",
        "--idle-wait=0.2",
        f"--store={store_url}",
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=out, stderr=out)
    return WorkerProcess(process, log)


def wait_for(what: str, ready: Callable[[], bool], workers: Sequence[WorkerProcess]) -> None:
    """Poll ``ready``; give up if a worker dies or the time runs out."""
    deadline = time.monotonic() + WORKER_TIMEOUT_SECONDS
    while not ready():
        for worker in workers:
            if worker.process.poll() is not None:
                raise SystemExit(f"a worker exited while {what}:\n{worker.text()}")
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out while {what}")
        time.sleep(0.01)


def stop_workers(workers: Sequence[WorkerProcess]) -> None:
    for worker in workers:
        if worker.process.poll() is None:
            worker.process.send_signal(signal.SIGTERM)  # finish, then exit
    for worker in workers:
        worker.process.wait(WORKER_TIMEOUT_SECONDS)


def drain(url: str, schema: str, tasks: int, processes: int, concurrency: int) -> Drain:
    """Start the workers, wait until each is up, then enqueue the batch: the
    NOTIFY wakes them all at once, and interpreter start-up is left out."""
    store_url = f"{url}?schema={schema}"
    with Cairn(store_url) as app, tempfile.TemporaryDirectory() as logs:
        task = app.task(name="bench_five_steps")(five_steps)
        _ = app.store  # the schema exists before the workers look at it
        workers = [
            start_worker(store_url, concurrency, Path(logs) / f"worker-{i}.log")
            for i in range(processes)
        ]
        try:
            wait_for("starting", lambda: all("at a time" in w.text() for w in workers), workers)
            started = time.perf_counter()
            app.enqueue(BATCH, task, [{"n": n} for n in range(tasks)])

            def drained() -> bool:
                return app.store.batch_counts(BATCH).get("completed") == tasks

            wait_for("draining the batch", drained, workers)
            wall = time.perf_counter() - started
        finally:
            stop_workers(workers)
        for worker in workers:
            if worker.process.returncode != 0:
                raise SystemExit(f"a worker failed on SIGTERM:\n{worker.text()}")
    return Drain(processes, _work_seconds(store_url, tasks), wall)


def _work_seconds(store_url: str, tasks: int) -> float:
    with Cairn(store_url) as app:
        [summary] = admin(app.store).batch_summaries(BATCH)
    if summary.counts != {"completed": tasks}:
        raise SystemExit(f"the batch did not complete: {summary.counts}")
    assert summary.first_started_at is not None
    assert summary.last_finished_at is not None
    return (summary.last_finished_at - summary.first_started_at).total_seconds()


def measure_workers(
    url: str, tasks: int, counts: Sequence[int], concurrency: int, runs: int
) -> dict[int, list[Drain]]:
    found: dict[int, list[Drain]] = {count: [] for count in counts}
    for run in range(runs):
        for count in counts:  # interleaved across runs, like (a)
            found[count].append(drain(url, f"w{count}_{run}", tasks, count, concurrency))
    return found


def report_workers(found: dict[int, list[Drain]], tasks: int, concurrency: int, runs: int) -> str:
    steps = tasks * 5
    base: float | None = None
    rows = []
    for count, drains in found.items():
        rates = [steps / d.work_seconds for d in drains]
        rate = median(rates)
        base = base or rate
        rows.append(
            [
                f"{count} worker(s) x {concurrency} threads",
                f"{rate:.0f}",
                f"{min(rates):.0f}..{max(rates):.0f}",
                fmt_ratio(rate / base),
                f"{median([d.work_seconds for d in drains]):.2f}",
                f"{median([d.wall_seconds for d in drains]):.2f}",
            ]
        )
    headers = ["workers", "steps/s", "min..max", "vs 1", "work s", "wall s"]
    return (
        f"(b) {tasks} tasks x 5 steps ({steps} steps) drained by worker processes, "
        f"{runs} run(s) each (medians; steps/s over the store's first start .. "
        f"last finish; wall s from the enqueue), {os.cpu_count()} CPUs\n"
        f"{table(headers, rows)}\n"
    )


# -- the program ---------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.postgres",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--runs", type=int, default=7, help="raw/cairn pairs (default 7)")
    parser.add_argument("--steps", type=int, default=500, help="steps per task (default 500)")
    parser.add_argument("--tasks", type=int, default=400, help="tasks in the workers' batch")
    parser.add_argument("--workers", default="1,2,4", help="worker process counts (1,2,4)")
    parser.add_argument("--concurrency", type=int, default=2, help="threads per worker (2)")
    parser.add_argument("--worker-runs", type=int, default=3, help="runs per count (3)")
    parser.add_argument("--both", action="store_true", help="(a) also with synchronous_commit=off")
    parser.add_argument("--no-workers", action="store_true", help="skip (b)")
    parser.add_argument(
        "--url",
        default=os.environ.get("CAIRN_TEST_POSTGRES_URL") or DEFAULT_URL,
        help="a server's maintenance database, where the throwaway one is created",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    with throwaway_database(args.url) as url:
        print(f"{server_settings(url)}; times in microseconds (us) per step\n")
        for mode in MODES if args.both else MODES[:1]:
            cost = measure_step_cost(url, mode, args.runs, args.steps)
            print(report_step_cost(cost, mode, args.runs, args.steps))
        if not args.no_workers:
            counts = [int(c) for c in args.workers.split(",")]
            found = measure_workers(url, args.tasks, counts, args.concurrency, args.worker_runs)
            print(report_workers(found, args.tasks, args.concurrency, args.worker_runs))


if __name__ == "__main__":
    main()
