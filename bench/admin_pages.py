"""How long does a page of the admin API take with 100,000 tasks in the store?

The store holds ``--tasks`` tasks spread over ``--batches`` batches (most
completed, one in twelve failed with an error, a few pending), and a thousand
of cairn's own alert tasks enqueued last, so a listing that hides them must
step over them on its newest page. Each query below is what one dashboard page
or ``cairn tasks`` call asks (``cairn.admin``), timed ``--runs`` times; the
median and the slowest run are printed in milliseconds, against the target of
300 ms a page.

With ``--url`` (a PostgreSQL server; a database is created and dropped), the
same is measured on PostgreSQL.

    .venv/bin/python -m bench.admin_pages [--tasks 100000] [--batches 310]
        [--runs 7] [--dir DIR] [--url postgresql://…/postgres]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench._stats import filesystem_of, median, table
from bench.claim_scale import with_database
from cairn.admin import TaskQuery, batch_page, batch_view, task_page, task_view
from cairn.store import open_store
from cairn.store.sqlbase import SQLStore
from cairn.store.sqlcore import Tx

START = datetime(2026, 5, 24, 0, 0, tzinfo=UTC)
TARGET_MS = 300.0
ALERTS = 1_000
INSERT = (
    "INSERT INTO tasks (id, batch, item_key, name, args, codec, status, error, created_at, "
    "started_at, finished_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
ERROR = json.dumps({"type": "httpx.ReadTimeout", "message": "upstream timed out after 30s"})


def _row(store: SQLStore, i: int, batches: int) -> tuple[Any, ...]:
    batch = f"batch-{i % batches:03d}"
    status = "failed" if i % 12 == 0 else "pending" if i % 97 == 0 else "completed"
    moment = store._ts(START + timedelta(seconds=i))
    finished = None if status == "pending" else moment
    error = ERROR.replace("30s", f"{i % 60}s") if status == "failed" else None
    return (
        f"{batch}/item={i}",
        batch,
        f"item={i}",
        "review",
        json.dumps({"item": i}),
        "json",
        status,
        error,
        moment,
        finished,
        finished,
        moment,
    )


def fill(store: SQLStore, tasks: int, batches: int) -> None:
    for b in range(batches):
        store.ensure_batch(f"batch-{b:03d}", "review", START + timedelta(microseconds=b))
    rows = [_row(store, i, batches) for i in range(tasks)]
    last = START + timedelta(seconds=tasks)
    stamp = store._ts(last)
    internal = ("cairn.observe.alert", "{}", "json", "completed", None, stamp, stamp, stamp, stamp)
    rows += [(f"alert/{i}", None, None, *internal) for i in range(ALERTS)]

    def write(tx: Tx) -> int:
        return tx.exec_many(INSERT, rows)

    store._atomically(write)
    store._exec("ANALYZE" if store.url.startswith("sqlite") else "ANALYZE tasks")


def queries(store: SQLStore, tasks: int) -> list[tuple[str, Callable[[], object]]]:
    """Each page a dashboard or ``cairn tasks`` asks for, as a call to time."""
    middle = task_page(store, TaskQuery(), size=50)
    for _ in range(20):  # 20 pages deep, about 1,000 tasks back
        assert middle.older is not None
        middle = task_page(store, TaskQuery(), older_than=middle.older, size=50)
    older, newer = middle.older, middle.newer
    half = START + timedelta(seconds=tasks // 2)
    return [
        ("newest page, no filter", lambda: task_page(store, TaskQuery())),
        ("page 21 deep (older cursor)", lambda: task_page(store, TaskQuery(), older_than=older)),
        ("page back (newer cursor)", lambda: task_page(store, TaskQuery(), newer_than=newer)),
        ("status failed", lambda: task_page(store, TaskQuery(status="failed"))),
        ("status pending", lambda: task_page(store, TaskQuery(status="pending"))),
        ("one batch", lambda: task_page(store, TaskQuery(batch="batch-120"))),
        (
            "one batch, failed",
            lambda: task_page(store, TaskQuery(batch="batch-120", status="failed")),
        ),
        ("task name", lambda: task_page(store, TaskQuery(name="review"))),
        ("since the middle", lambda: task_page(store, TaskQuery(since=half))),
        ("search an id", lambda: task_page(store, TaskQuery(search="batch-007/item=700"))),
        ("search error text", lambda: task_page(store, TaskQuery(search="after 42s"))),
        ("with cairn's own tasks", lambda: task_page(store, TaskQuery(include_internal=True))),
        ("batch index page", lambda: batch_page(store)),
        ("batch view", lambda: batch_view(store, "batch-120", START + timedelta(days=2))),
        ("task view", lambda: task_view(store, "batch-120/item=120")),
    ]


def measure(store: SQLStore, tasks: int, runs: int) -> list[list[str]]:
    rows = []
    for label, call in queries(store, tasks):
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            call()
            times.append((time.perf_counter() - started) * 1000)
        worst = max(times)
        verdict = "ok" if worst < TARGET_MS else "OVER"
        rows.append([label, f"{median(times):.1f}", f"{worst:.1f}", verdict])
    return rows


def report(title: str, rows: list[list[str]]) -> None:
    print(f"\n{title}")
    print(table(["page", "ms (median)", "ms (slowest)", f"< {TARGET_MS:.0f} ms"], rows))


@contextmanager
def postgres_store(url: str) -> Iterator[SQLStore]:
    import psycopg

    name = "cairn_bench_admin_pages"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    store = open_store(with_database(url, name))
    try:
        assert isinstance(store, SQLStore)
        yield store
    finally:
        store.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=310)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--url", default=None, help="a PostgreSQL server to measure too")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_args(argv)
    shape = f"{options.tasks:,} tasks in {options.batches} batches and {ALERTS:,} of cairn's own"
    with tempfile.TemporaryDirectory(dir=options.dir) as scratch:
        folder = Path(scratch)
        print(f"SQLite file on {filesystem_of(folder)}")
        store = open_store(f"sqlite:///{folder / 'pages.db'}")
        assert isinstance(store, SQLStore)
        try:
            fill(store, options.tasks, options.batches)
            report(f"SQLite, {shape}", measure(store, options.tasks, options.runs))
        finally:
            store.close()
    if options.url:
        with postgres_store(options.url) as pg:
            fill(pg, options.tasks, options.batches)
            report(f"PostgreSQL, {shape}", measure(pg, options.tasks, options.runs))


if __name__ == "__main__":
    main()
