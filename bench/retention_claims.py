"""Do claims wait on retention? A retention run beside a running batch.

A store holds ``--finished`` old finished tasks (``--batches`` batches, each
task with ``--steps`` history rows, finished 40 days ago) and one live batch
of ``--pending`` pending tasks. One thread claims tasks of the live batch one
at a time, timing each claim, the way a worker does; first alone (the floor),
then while another thread runs the retention policy ``completed=30d`` over the
store (``cairn.retention.run_chunks``, chunks of ``--chunk`` tasks, one after
another with no pause: harder on the claims than a worker's one chunk a
second). Claimed tasks go back to pending every 200 claims, outside the timing.

Printed: the claim latencies (median, 99th percentile, slowest) alone and
beside the run, their ratio, the run's time and its slowest chunk, and a check
that the run deleted exactly the old tasks (and every row of theirs) and left
the live batch whole. The target (issue: retention that runs itself): no claim
waits on it for more than 100 ms.

    .venv/bin/python -m bench.retention_claims [--finished 100000] [--batches 100]
        [--steps 4] [--pending 2000] [--chunk 200] [--dir DIR] [--url postgresql://…]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

from bench._stats import filesystem_of, fmt_ratio, median, ratio, table
from bench.claim_scale import with_database
from cairn.retention import Retention, run_chunks
from cairn.store import open_store
from cairn.store.sqlbase import SQLStore
from cairn.store.sqlcore import Tx

NOW = datetime.now(UTC)
OLD = NOW - timedelta(days=40)
LEASE_UNTIL = NOW + timedelta(minutes=30)
POLICY = Retention(completed="30d")
TASK = (
    "INSERT INTO tasks (id, batch, item_key, name, args, codec, status, created_at, "
    "updated_at, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
STEP = (
    "INSERT INTO steps (task_id, seq, kind, name, status, output, attempts, task_attempt, "
    "run_attempts, started_at, finished_at) VALUES (?, ?, 'step', ?, 'completed', ?, 1, 1, 1, ?, ?)"
)


def fill(store: SQLStore, finished: int, batches: int, steps: int, pending: int) -> None:
    """The old batches (finished 40 days ago, with their history) and the live one."""
    old = store._ts(OLD)
    per_batch = finished // batches
    for b in range(batches):
        name = f"old-{b:04d}"
        store.ensure_batch(name, "job", OLD)
        ids = [f"{name}/{i}" for i in range(per_batch)]
        tasks = [(t, name, t, "job", "{}", "json", "completed", old, old, old) for t in ids]
        history = [
            (t, s, f"s{s}", '"a recorded value"', old, old) for t in ids for s in range(steps)
        ]

        store._atomically(partial(_write, tasks=tasks, history=history))
    now = store._ts(NOW)
    store.ensure_batch("live", "job", NOW)
    live = [
        (f"live/{i}", "live", str(i), "job", "{}", "json", "pending", now, now, None)
        for i in range(pending)
    ]
    store._atomically(lambda tx: tx.exec_many(TASK, live))
    store._exec("ANALYZE" if store.url.startswith("sqlite") else "ANALYZE tasks")


def _write(
    tx: Tx, *, tasks: Sequence[Sequence[object]], history: Sequence[Sequence[object]]
) -> None:
    tx.exec_many(TASK, tasks)
    tx.exec_many(STEP, history)


def claim_latencies(store: SQLStore, stop: threading.Event, at_least: int) -> list[float]:
    """Seconds of each claim of a live task, until ``stop`` is set (and at least
    ``at_least`` claims); claimed tasks go back to pending every 200, untimed."""
    found: list[float] = []
    while not stop.is_set() or len(found) < at_least:
        started = time.perf_counter()
        claimed = store.claim_next_pending("live", "bench", LEASE_UNTIL, NOW)
        found.append(time.perf_counter() - started)
        assert claimed is not None
        if len(found) % 200 == 0:
            store._exec(
                "UPDATE tasks SET status = 'pending', owner = NULL WHERE status = 'running'"
            )
    store._exec("UPDATE tasks SET status = 'pending', owner = NULL WHERE status = 'running'")
    return found


def retention_run(
    store: SQLStore, chunk: int, done: threading.Event, out: dict[str, float]
) -> None:
    """The whole run, a chunk after another; its time, tasks and slowest chunk in ``out``."""
    started = last = time.perf_counter()
    slowest = 0.0
    deleted = 0
    for gone in run_chunks(store, [POLICY], NOW, chunk=chunk):
        now = time.perf_counter()
        slowest, last = max(slowest, now - last), now
        deleted += gone
    out.update(seconds=time.perf_counter() - started, slowest=slowest, deleted=deleted)
    done.set()


def measure(store: SQLStore, chunk: int) -> tuple[list[float], list[float], dict[str, float]]:
    alone = claim_latencies(store, _set(threading.Event()), 1000)
    done, out = threading.Event(), dict[str, float]()
    runner = threading.Thread(target=retention_run, args=(store, chunk, done, out))
    runner.start()
    beside = claim_latencies(store, done, 100)
    runner.join()
    return alone, beside, out


def _set(event: threading.Event) -> threading.Event:
    event.set()
    return event


def check(store: SQLStore, finished: int, pending: int) -> str:
    """That the run deleted the old tasks, every row of theirs, and nothing else."""
    left = {
        table: int(store._exec(f"SELECT COUNT(*) FROM {table}").rows[0][0])
        for table in ("tasks", "steps", "batches")
    }
    live = int(
        store._exec("SELECT COUNT(*) FROM tasks WHERE batch = 'live' AND status = 'pending'").rows[
            0
        ][0]
    )
    ok = left == {"tasks": pending, "steps": 0, "batches": 1} and live == pending
    return f"{'ok' if ok else 'WRONG'}: left {left}, live pending {live} (deleted {finished} old)"


def report(
    title: str, alone: list[float], beside: list[float], out: dict[str, float], checked: str
) -> None:
    rows = []
    for label, values in (("claims alone", alone), ("claims beside the run", beside)):
        ordered = sorted(values)
        p99 = ordered[int(0.99 * (len(ordered) - 1))]
        rows.append(
            [
                label,
                str(len(values)),
                f"{median(values) * 1e3:.2f}",
                f"{p99 * 1e3:.2f}",
                f"{ordered[-1] * 1e3:.2f}",
            ]
        )
    print(f"\n{title}")
    print(table(["", "claims", "median ms", "p99 ms", "slowest ms"], rows))
    print(
        f"median beside / alone: {fmt_ratio(ratio(median(beside), median(alone)))}; "
        f"run: {out['seconds']:.1f} s for {int(out['deleted']):,} tasks, slowest chunk "
        f"{out['slowest'] * 1e3:.1f} ms; {checked}"
    )


@contextmanager
def sqlite_store(folder: Path) -> Iterator[SQLStore]:
    store = open_store(f"sqlite:///{folder / 'retention.db'}")
    assert isinstance(store, SQLStore)
    try:
        yield store
    finally:
        store.close()


@contextmanager
def postgres_store(url: str) -> Iterator[SQLStore]:
    import psycopg

    name = "cairn_bench_retention"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    store = open_store(with_database(url, name))
    assert isinstance(store, SQLStore)
    try:
        yield store
    finally:
        store.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def one(title: str, store: SQLStore, options: argparse.Namespace) -> None:
    fill(store, options.finished, options.batches, options.steps, options.pending)
    alone, beside, out = measure(store, options.chunk)
    report(title, alone, beside, out, check(store, options.finished, options.pending))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--finished", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--pending", type=int, default=2_000)
    parser.add_argument("--chunk", type=int, default=200)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--url", default=None, help="a PostgreSQL server to measure too")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_args(argv)
    with tempfile.TemporaryDirectory(dir=options.dir) as scratch:
        print(f"SQLite file on {filesystem_of(Path(scratch))}")
        with sqlite_store(Path(scratch)) as store:
            one("SQLite", store, options)
    if options.url:
        with postgres_store(options.url) as store:
            one("PostgreSQL", store, options)


if __name__ == "__main__":
    main()
