"""What do the PostgreSQL trigram indexes of the task search (schema 11) cost at
enqueue, and what do they give a search for a rare term?

For each variant of the three indexes (``none``: dropped, the floor, as on a
store without ``pg_trgm``; ``direct``: as the migration makes them,
``fastupdate = off``, each entry put in the index at insert; ``fastupdate``:
PostgreSQL's default, new entries kept in a pending list that every search
reads until a vacuum, or a full list, merges them), a new database is migrated
and then:

- ``--enqueue`` tasks (20,000) go through ``app.enqueue`` in one call, timed
  (milliseconds per 1,000 tasks);
- the store is filled to 100,000 tasks (``bench.admin_pages.fill``), and the
  first page of a search for each of three rare or absent terms is read
  ``--reads`` times (``cairn.admin.task_page``, as the dashboard reads it),
  first as the fill left the store (``ANALYZE`` only), then after ``VACUUM``.

The variants are measured in turn, ``--runs`` rounds, each round in a new order;
the figure is the median of the rounds (and of the reads within one).

    .venv/bin/python -m bench.search_index --url postgresql://…/postgres
        [--runs 3] [--enqueue 20000] [--tasks 100000] [--reads 7]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import psycopg

from bench._stats import fmt_ratio, median, ratio, table
from bench.admin_pages import fill
from bench.claim_scale import with_database
from cairn import Cairn, Context
from cairn.admin import TaskQuery, task_page
from cairn.store.sqlbase import SQLStore

DATABASE = "cairn_bench_search_index"
INDEXES = ("tasks_id_trigrams", "tasks_name_trigrams", "tasks_error_trigrams")
VARIANTS = ("none", "direct", "fastupdate")
# A part of an id, an id, a text found nowhere (the dashboard bench's searches).
TERMS = ("item=7001", "batch-007/item=700", "no such text anywhere")


@contextmanager
def _store(url: str, variant: str) -> Iterator[Cairn]:
    """A new database, migrated, its trigram indexes as ``variant`` has them."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DATABASE}")
    app = Cairn(with_database(url, DATABASE))
    try:
        store = app.store
        assert isinstance(store, SQLStore)
        for index in INDEXES:
            if variant == "none":
                store._exec(f"DROP INDEX {index}")
            elif variant == "fastupdate":
                store._exec(f"ALTER INDEX {index} SET (fastupdate = on)")
        yield app
    finally:
        app.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")


def _enqueue_ms_per_1000(app: Cairn, count: int) -> float:
    @app.task(name="review")
    def review(ctx: Context, n: int) -> int:
        return n

    started = time.perf_counter()
    app.enqueue("enqueued", review, [{"n": n} for n in range(count)])
    return (time.perf_counter() - started) * 1000 / (count / 1000)


def _search_ms(store: SQLStore, reads: int) -> float:
    """The median over ``TERMS`` and ``reads`` of one search's first page."""
    times = []
    for term in TERMS:
        for _ in range(reads):
            started = time.perf_counter()
            task_page(store, TaskQuery(search=term))
            times.append((time.perf_counter() - started) * 1000)
    return median(times)


def one_round(url: str, variant: str, options: argparse.Namespace) -> tuple[float, float, float]:
    """(enqueue ms per 1,000, search ms after the fill, search ms after VACUUM)."""
    with _store(url, variant) as app:
        store = app.store
        assert isinstance(store, SQLStore)
        enqueue = _enqueue_ms_per_1000(app, options.enqueue)
        fill(store, options.tasks - options.enqueue, 310)
        filled = _search_ms(store, options.reads)
        store._exec("VACUUM tasks")
        return enqueue, filled, _search_ms(store, options.reads)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="a PostgreSQL server (a database is made)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--enqueue", type=int, default=20_000)
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--reads", type=int, default=7)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_args(argv)
    figures: dict[str, list[tuple[float, float, float]]] = {v: [] for v in VARIANTS}
    for run in range(options.runs):
        order = VARIANTS[run % 3 :] + VARIANTS[: run % 3]
        for variant in order:
            figures[variant].append(one_round(options.url, variant, options))
    floor = median([f[0] for f in figures["none"]])
    rows = []
    for variant in VARIANTS:
        enqueue, filled, vacuumed = (median([f[i] for f in figures[variant]]) for i in range(3))
        ratio_text = fmt_ratio(ratio(enqueue, floor))
        rows.append([variant, f"{enqueue:.1f}", ratio_text, f"{filled:.1f}", f"{vacuumed:.1f}"])
    print(
        f"\nPostgreSQL: {options.enqueue:,} tasks through app.enqueue, then a search at "
        f"{options.tasks:,} tasks; medians of {options.runs} rounds"
    )
    headers = ["trigram indexes", "enqueue ms/1,000", "vs none", "search ms", "after VACUUM"]
    print(table(headers, rows))


if __name__ == "__main__":
    main()
