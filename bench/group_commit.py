"""Group commit: many tasks of one process, against the one-commit-at-a-time floor.

One process runs a batch of T tasks x S trivial steps, as T async tasks at
concurrency T (one event loop) or as sync tasks on 16 threads, with group
commit on (``Cairn(group_commit=True)``; unsaid, it is on except on SQLite
``NORMAL``) and off (``Cairn(group_commit=False)``: each step commits alone).
Its steps/s is set against 1/(raw commit latency), the rate of single-row
INSERTs each committed alone into a table shaped like cairn's step rows,
measured in the same round on the same kind of store (SQLite: a WAL file with
the same ``synchronous``; PostgreSQL: the same server). Contenders run in
turn, each on a fresh store, once per round; tables give medians of per-round
ratios, and the CPU time the process spent per step (the machine may be
loaded; CPU time is what group commit cannot share out).

The floor's durability is printed with it: SQLite ``synchronous=FULL`` fsyncs
the WAL at every commit (durable against power loss), ``NORMAL`` does not (a
commit survives the process being killed, not the machine losing power);
PostgreSQL's is its ``fsync`` and ``synchronous_commit`` settings, read from
the server. cairn's own writes have exactly the floor's durability.

    .venv/bin/python -m bench.group_commit [--runs 3] [--tasks 100] [--steps 50]
        [--synchronous NORMAL FULL] [--postgres-url URL | --no-postgres] [--dir DIR]
        [--with-once]

``--with-once`` adds async tasks whose every step is a ``ctx.once`` (a claim
committed before the call, then its record), both grouped with group commit on.

Target: >= 3x 1/(raw commit latency) on SQLite with 100 async tasks
and with 16 threads, and on PostgreSQL.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench._stats import filesystem_of, fmt_ratio, median, table
from cairn import Cairn, Context
from cairn.store.groupcommit import coalescer_for

TARGET = 3.0
THREADS = 16
_RAW_SCHEMA = (
    "CREATE TABLE steps (task_id TEXT NOT NULL, seq INTEGER NOT NULL, name TEXT NOT NULL, "
    "output TEXT, PRIMARY KEY (task_id, seq))"
)
_RAW_INSERT = "INSERT INTO steps (task_id, seq, name, output) VALUES (?, ?, ?, ?)"


def trivial(i: int) -> int:
    return i + 1


async def atrivial(i: int) -> int:
    return i + 1


async def aonce(key: str, i: int) -> int:
    return i + 1


# -- the floors ---------------------------------------------------------------------------
def raw_sqlite(path: Path, synchronous: str, commits: int) -> float:
    """Seconds per single-row commit on a WAL file with ``synchronous``."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute(_RAW_SCHEMA)
        started = time.perf_counter()
        for i in range(commits):
            conn.execute(_RAW_INSERT, ("bench/raw", i, "s", str(i)))
        return (time.perf_counter() - started) / commits
    finally:
        conn.close()


def raw_postgres(url: str, commits: int) -> float:
    """Seconds per single-row commit (autocommit) on the server at ``url``."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_raw_steps")
        conn.execute(_RAW_SCHEMA.replace("steps", "bench_raw_steps", 1))
        insert = _RAW_INSERT.replace("steps", "bench_raw_steps", 1).replace("?", "%s")
        started = time.perf_counter()
        for i in range(commits):
            conn.execute(insert, ("bench/raw", i, "s", str(i)))
        elapsed = time.perf_counter() - started
        conn.execute("DROP TABLE bench_raw_steps")
    return elapsed / commits


# -- worker processes on PostgreSQL -----------------------------------------------------------
WORKERS = 4
WORKER_THREADS = 25


def fifty(ctx: Context, n: int, steps: int) -> int:
    """A batch task for the worker processes: ``steps`` trivial steps."""
    total = 0
    for i in range(steps):
        total += ctx.step("s", trivial, i)
    return total


# The apps the worker processes load (``cairn worker bench.group_commit:...``).
worker_app = Cairn(group_commit=True)
worker_app.task(name="gc_fifty")(fifty)
worker_app_alone = Cairn(group_commit=False)
worker_app_alone.task(name="gc_fifty")(fifty)


def workers_drain(url: str, on: bool, tasks: int, steps: int) -> float:
    """Steps/s of ``WORKERS`` worker processes of ``WORKER_THREADS`` threads
    draining ``tasks`` tasks (the store's first start .. last finish)."""
    from bench.postgres import PROJECT_ROOT, WorkerProcess, stop_workers, wait_for

    spec = "bench.group_commit:worker_app" if on else "bench.group_commit:worker_app_alone"
    with Cairn(url) as app, tempfile.TemporaryDirectory() as logs:
        task = app.task(name="gc_fifty")(fifty)
        _ = app.store
        workers = []
        for i in range(WORKERS):
            log = Path(logs) / f"worker-{i}.log"
            command = [
                sys.executable, "-c", "from cairn.cli import main; main()", "worker", spec,
                f"--concurrency={WORKER_THREADS}", "--idle-wait=0.2", f"--store={url}",
            ]  # fmt: skip
            with log.open("wb") as out:
                process = subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=out, stderr=out)
            workers.append(WorkerProcess(process, log))
        try:
            wait_for("starting", lambda: all("at a time" in w.text() for w in workers), workers)
            app.enqueue("bench", task, [{"n": n, "steps": steps} for n in range(tasks)])
            wait_for(
                "draining the batch",
                lambda: app.store.batch_counts("bench").get("completed") == tasks,
                workers,
            )
        finally:
            stop_workers(workers)
    return tasks * steps / _work_seconds_of(url, tasks)


def _work_seconds_of(url: str, tasks: int) -> float:
    from cairn.store import admin

    with Cairn(url) as app:
        [summary] = admin(app.store).batch_summaries("bench")
    if summary.counts != {"completed": tasks}:
        raise SystemExit(f"the batch did not complete: {summary.counts}")
    assert summary.first_started_at is not None
    assert summary.last_finished_at is not None
    return (summary.last_finished_at - summary.first_started_at).total_seconds()


# -- cairn ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Drained:
    """One batch run: its steps/s, and how many writes shared a commit."""

    steps_per_second: float
    batched_share: float
    cpu_seconds: float


def drain(app: Cairn, mode: str, tasks: int, steps: int) -> Drained:
    """Run ``tasks`` tasks of ``steps`` steps in this process, ``mode`` being
    ``async`` (one event loop, concurrency = tasks), ``threads``, or
    ``async-once`` (``async``, each step a ``ctx.once``: a claim and a record)."""
    if mode == "async-once":

        async def many_once(ctx: Context, n: int, i: int) -> int:
            total = 0
            for j in range(n):
                total += await ctx.once(f"{ctx.task_id}/{j}", aonce, j)
            return total

        task = app.task(name="many_once")(many_once)
        concurrency = tasks
    elif mode == "async":

        async def many_async(ctx: Context, n: int, i: int) -> int:
            total = 0
            for i in range(n):
                total += await ctx.step("s", atrivial, i)
            return total

        task = app.task(name="many_async")(many_async)
        concurrency = tasks
    else:

        def many_sync(ctx: Context, n: int, i: int) -> int:
            total = 0
            for i in range(n):
                total += ctx.step("s", trivial, i)
            return total

        task = app.task(name="many_sync")(many_sync)  # type: ignore[arg-type]
        concurrency = THREADS
    items = [{"n": steps, "i": i} for i in range(tasks)]
    app.enqueue("gc", task, items)
    wall, cpu = time.perf_counter(), time.process_time()
    report = app.run_batch("gc", task, concurrency=concurrency, progress=False)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if report.counts.get("completed") != tasks:
        raise RuntimeError(f"the batch did not complete: {report.counts}")
    group = coalescer_for(app.store) if app.group_commit else None
    writes = tasks * steps * (2 if mode == "async-once" else 1)  # a once: claim and record
    share = 0.0 if group is None else group.batched_writes / writes
    return Drained(tasks * steps / wall, share, cpu)


@dataclass
class Row:
    label: str
    ratios: list[float]
    rates: list[float]
    shares: list[float]
    cpu_us: list[float] = field(default_factory=list)


def run(
    make_store: Callable[[str], str],
    floor: Callable[[], float],
    runs: int,
    tasks: int,
    steps: int,
    synchronous: str | None,
    modes: Sequence[str] = ("async", "threads"),
) -> tuple[list[Row], list[float]]:
    rows = {
        (mode, on): Row(
            f"{mode} x{THREADS if mode == 'threads' else tasks}, "
            f"group commit {'on' if on else 'off'}",
            [],
            [],
            [],
        )
        for mode in modes
        for on in (True, False)
    }
    floors: list[float] = []
    for round_ in range(runs):
        latency = floor()
        floors.append(latency)
        for (mode, on), row in rows.items():
            url = make_store(f"r{round_}_{mode}_{int(on)}")
            kwargs = {} if synchronous is None else {"synchronous": synchronous}
            with Cairn(url, group_commit=on, **kwargs) as app:  # type: ignore[arg-type]
                found = drain(app, mode, tasks, steps)
            row.rates.append(found.steps_per_second)
            row.ratios.append(found.steps_per_second * latency)
            row.shares.append(found.batched_share)
            row.cpu_us.append(found.cpu_seconds / (tasks * steps) * 1e6)
    return list(rows.values()), floors


def run_workers(url: str, runs: int, tasks: int, steps: int) -> tuple[list[Row], list[float]]:
    """``WORKERS`` worker processes, group commit on and off, each round
    against the raw commit floor measured in that round."""
    rows = {
        on: Row(
            f"{WORKERS} workers x {WORKER_THREADS} threads, group commit {'on' if on else 'off'}",
            [],
            [],
            [],
        )
        for on in (True, False)
    }
    floors: list[float] = []
    for round_ in range(runs):
        latency = raw_postgres(url, 500)
        floors.append(latency)
        for on, row in rows.items():
            rate = workers_drain(f"{url}?schema=gcw_{round_}_{int(on)}", on, tasks, steps)
            row.rates.append(rate)
            row.ratios.append(rate * latency)
            row.shares.append(float("nan"))
    return list(rows.values()), floors


def report(title: str, rows: Sequence[Row], floors: Sequence[float]) -> str:
    lines = [
        [
            row.label,
            f"{median(row.rates):.0f}",
            f"{min(row.rates):.0f}..{max(row.rates):.0f}",
            fmt_ratio(median(row.ratios)),
            "-" if row.shares[0] != row.shares[0] else f"{median(row.shares):.0%}",
            f"{median(row.cpu_us):.0f}" if row.cpu_us else "-",
        ]
        for row in rows
    ]
    floor = median(floors)
    headers = [
        "contender", "steps/s", "min..max", "vs 1/commit", "in shared commits", "CPU us/step",
    ]  # fmt: skip
    return (
        f"{title}: raw commit {floor * 1e6:.0f} us median, so 1/commit = {1 / floor:.0f}/s "
        f"(target >= {TARGET:.0f}x for group commit on)\n{table(headers, lines)}\n"
    )


def sqlite_durability(synchronous: str) -> str:
    """What a commit at ``synchronous`` survives, floor and cairn alike."""
    if synchronous.upper() in ("FULL", "EXTRA"):
        return "the WAL is fsynced at every commit: durable against power loss"
    return "no fsync at commit: durable against a killed process, not a power loss"


def postgres_durability(url: str) -> str:
    """The server's own durability settings, read from it."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        settings = [
            f"{name}={conn.execute(f'SHOW {name}').fetchone()[0]}"  # type: ignore[index]
            for name in ("fsync", "synchronous_commit", "wal_sync_method")
        ]
    return ", ".join(settings)


def _sqlite_contenders(
    workdir: Path, mode: str
) -> tuple[Callable[[str], str], Callable[[], float]]:
    """A new store file per contender, and the floor on a new file, for ``mode``."""
    counter = iter(range(10**6))

    def store(name: str) -> str:
        return f"sqlite:///{workdir / f'{name}_{mode}.db'}"

    def floor() -> float:
        return raw_sqlite(workdir / f"raw_{mode}_{next(counter)}.db", mode, 500)

    return store, floor


def main(
    workdir: Path,
    runs: int,
    tasks: int,
    steps: int,
    synchronous: Sequence[str],
    postgres_url: str | None,
    modes: Sequence[str] = ("async", "threads"),
) -> str:
    out = [
        f"group commit: {tasks} tasks x {steps} trivial steps in one process, {runs} round(s), "
        f"{os.cpu_count()} CPUs, files on {filesystem_of(workdir)}, "
        f"load {os.getloadavg()[0]:.1f} at start"
    ]
    for mode in synchronous:
        rows, floors = run(*_sqlite_contenders(workdir, mode), runs, tasks, steps, mode, modes)
        title = f"SQLite, WAL, synchronous={mode} ({sqlite_durability(mode)})"
        out.append(report(title, rows, floors))
    if postgres_url is not None:
        from bench.side_steps import scratch_database

        with scratch_database(postgres_url, "groupcommit") as url:
            schemas = iter(range(10**6))

            def pg_store(name: str) -> str:
                return f"{url}?schema=gc_{next(schemas)}"

            floor = lambda: raw_postgres(url, 500)  # noqa: E731
            rows, floors = run(pg_store, floor, runs, tasks, steps, None, modes)
            more, more_floors = run_workers(url, runs, tasks, steps)
        durability = postgres_durability(postgres_url)
        out.append(report(f"PostgreSQL (this machine's server; {durability}), one process",
                          rows, floors))  # fmt: skip
        out.append(report(f"PostgreSQL ({durability}), worker processes", more, more_floors))
    out.append(f"load {os.getloadavg()[0]:.1f} at end")
    return "\n".join(out)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.group_commit", description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--synchronous", nargs="*", default=["NORMAL", "FULL"])
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("CAIRN_TEST_POSTGRES_URL")
        or "postgresql://postgres@127.0.0.1:5432/postgres",
    )
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument(
        "--with-once",
        action="store_true",
        help="also async x TASKS whose every step is a ctx.once (a claim and a record)",
    )
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.no_postgres:
        args.postgres_url = None
    return args


if __name__ == "__main__":
    import sys

    parsed = parse_args(sys.argv[1:])
    with tempfile.TemporaryDirectory(prefix="cairn-bench-gc-", dir=parsed.dir) as name:
        print(
            main(
                Path(name),
                parsed.runs,
                parsed.tasks,
                parsed.steps,
                parsed.synchronous,
                parsed.postgres_url,
                ("async", "threads", "async-once") if parsed.with_once else ("async", "threads"),
            )
        )
    asyncio.set_event_loop_policy(None)
