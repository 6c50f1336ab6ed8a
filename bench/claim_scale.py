"""Does a claim stay flat as finished tasks pile up?

Each store holds ``--pending`` pending tasks (in one batch, enqueued *after* the
finished ones, so walking the tasks in enqueue order meets every finished one
first) and either no finished task (the floor) or ``--finished`` of them. The
timed work is ``--claims`` claims of the next pending task, the way a worker
claims (any batch of its task names) and the way ``run_batch`` does (one
batch); claimed tasks are put back to pending between runs, outside the timing.
Empty and full stores alternate for ``--runs`` rounds; the medians and their
ratio are printed: flat means a ratio near 1.

A third kind, "fair worker", claims as a worker does since schema 12 (round-robin
between batches, docs/workers.md): each store also holds a second batch ``c`` of
``--pending / 20`` tasks, and the claim goes to the next batch after the last
one claimed from. Its ratio to the plain worker claim of the same store, in the
same run, is the price of fairness.

With ``--url`` (a PostgreSQL server; databases are created and dropped), the
same is measured on PostgreSQL, and once more on a full store without schema 2's
partial indexes: the plan a claim had before them.

    .venv/bin/python -m bench.claim_scale [--finished 100000] [--pending 2000]
        [--claims 200] [--runs 5] [--dir DIR] [--url postgresql://…/postgres]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from bench._stats import filesystem_of, fmt_ratio, median, ratio, spread, table
from cairn.store import open_store
from cairn.store.sqlbase import SQLStore
from cairn.store.sqlcore import Tx

NOW = datetime(2026, 5, 24, 4, 30, tzinfo=UTC)
LEASE_UNTIL = NOW + timedelta(seconds=30)
SCHEMA_2_INDEXES = ("tasks_pending", "tasks_pending_by_batch", "tasks_running_by_lease")
INSERT = (
    "INSERT INTO tasks (id, batch, item_key, name, args, codec, status, created_at, "
    "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


KINDS = ("worker", "fair worker", "batch")


def fill(store: SQLStore, finished: int, pending: int) -> None:
    stamp = store._ts(NOW)
    store.ensure_batch("b", "job", NOW)
    rows = [
        (f"b/{i}", "b", str(i), "job", "{}", "json", "completed", stamp, stamp)
        for i in range(finished)
    ]
    rows += [
        (f"b/p{i}", "b", f"p{i}", "job", "{}", "json", "pending", stamp, stamp)
        for i in range(pending)
    ]
    store.ensure_batch("c", "job", NOW)
    rows += [
        (f"c/p{i}", "c", f"p{i}", "job", "{}", "json", "pending", stamp, stamp)
        for i in range(max(1, pending // 20))
    ]

    def write(tx: Tx) -> int:
        return tx.exec_many(INSERT, rows)

    store._atomically(write)
    store._exec("ANALYZE" if store.url.startswith("sqlite") else "ANALYZE tasks")


def claim_seconds(store: SQLStore, claims: int, how: str) -> float:
    """Seconds per claim of ``claims`` claims, then every claimed task put back."""
    batch, names = ("b", None) if how == "batch" else (None, ("job",))
    after = "" if how == "fair worker" else None
    started = time.perf_counter()
    for _ in range(claims):
        claimed = store.claim_next_pending(
            batch, "bench", LEASE_UNTIL, NOW, names=names, after_batch=after
        )
        assert claimed is not None
        if after is not None:  # as engine.claim.Claimer moves on
            after = claimed.batch if claimed.batch and claimed.batch > after else ""
    spent = time.perf_counter() - started
    store._exec("UPDATE tasks SET status = 'pending', owner = NULL WHERE status = 'running'")
    return spent / claims


def measure(
    stores: dict[str, SQLStore], claims: int, runs: int
) -> dict[tuple[str, str], list[float]]:
    """Microseconds per claim, per (store label, claim kind), over alternating runs."""
    found: dict[tuple[str, str], list[float]] = {}
    for _ in range(runs):
        for how in KINDS:
            for label, store in stores.items():
                us = claim_seconds(store, claims, how) * 1e6
                found.setdefault((label, how), []).append(us)
    return found


def report(title: str, found: dict[tuple[str, str], list[float]], floor: str) -> None:
    rows = []
    for how in KINDS:
        base = median(found[(floor, how)])
        for (label, kind), values in found.items():
            if kind != how:
                continue
            rows.append(
                [
                    f"{how} claim, {label}",
                    f"{median(values):.1f}",
                    spread(values),
                    fmt_ratio(ratio(median(values), base)),
                ]
            )
    print(f"\n{title}")
    print(table(["claim", "µs (median)", "runs", f"vs {floor}"], rows))
    fair = []
    for label in {label for label, _ in found}:
        plain, fair_us = median(found[(label, "worker")]), median(found[(label, "fair worker")])
        fair.append([label, f"{plain:.1f}", f"{fair_us:.1f}", fmt_ratio(ratio(fair_us, plain))])
    print(table(["store", "worker claim µs", "fair worker claim µs", "fair vs worker"], fair))


@contextmanager
def sqlite_stores(folder: Path, finished: int, pending: int) -> Iterator[dict[str, SQLStore]]:
    stores: dict[str, SQLStore] = {}
    try:
        for label, count in (("no finished", 0), (f"{finished:,} finished", finished)):
            store = open_store(f"sqlite:///{folder / f'claims-{count}.db'}")
            assert isinstance(store, SQLStore)
            fill(store, count, pending)
            stores[label] = store
        yield stores
    finally:
        for store in stores.values():
            store.close()


@contextmanager
def postgres_stores(url: str, finished: int, pending: int) -> Iterator[dict[str, SQLStore]]:
    import psycopg

    made: list[str] = []
    stores: dict[str, SQLStore] = {}

    def database(name: str) -> str:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name}")
            conn.execute(f"CREATE DATABASE {name}")
        made.append(name)
        return with_database(url, name)

    variants: list[tuple[str, int, Callable[[SQLStore], None] | None]] = [
        ("no finished", 0, None),
        (f"{finished:,} finished", finished, None),
        (f"{finished:,} finished, schema 1 indexes", finished, drop_schema_2_indexes),
    ]
    try:
        for number, (label, count, change) in enumerate(variants):
            store = open_store(database(f"cairn_bench_claims_{number}"))
            assert isinstance(store, SQLStore)
            if change is not None:
                change(store)
            fill(store, count, pending)
            stores[label] = store
        yield stores
    finally:
        for store in stores.values():
            store.close()
        with psycopg.connect(url, autocommit=True) as conn:
            for name in made:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


def drop_schema_2_indexes(store: SQLStore) -> None:
    for index in SCHEMA_2_INDEXES:
        store._exec(f"DROP INDEX {index}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--finished", type=int, default=100_000)
    parser.add_argument("--pending", type=int, default=2_000)
    parser.add_argument("--claims", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--url", default=None, help="a PostgreSQL server to measure too")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_args(argv)
    with tempfile.TemporaryDirectory(dir=options.dir) as scratch:
        folder = Path(scratch)
        print(f"SQLite files on {filesystem_of(folder)}")
        with sqlite_stores(folder, options.finished, options.pending) as stores:
            found = measure(stores, options.claims, options.runs)
        report("SQLite", found, "no finished")
    if options.url:
        with postgres_stores(options.url, options.finished, options.pending) as stores:
            found = measure(stores, options.claims, options.runs)
        report("PostgreSQL", found, "no finished")


if __name__ == "__main__":
    main()
