"""Does a drain stay fast right after a bulk cancel, on PostgreSQL?

The floor: a worker-style drain (claims of any batch, by task name) of
``--drain`` pending tasks on an empty store. The case: the same drain on a store
where ``--cancelled`` pending tasks, enqueued before them, were just cancelled as
one batch (what `cairn cancel --batch` does). The store refreshes the planner's
statistics after such a change (``refresh_task_statistics``); ``--no-refresh``
measures the drain without it, as before. Stores alternate for ``--runs`` rounds;
the medians and the ratio to the floor are printed (target: at most 1.5x).

    .venv/bin/python -m bench.drain_after_cancel --url postgresql://…/postgres
        [--cancelled 100000] [--drain 400] [--runs 5] [--no-refresh]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import psycopg

from bench._stats import fmt_ratio, median, ratio, spread, table
from bench.claim_scale import LEASE_UNTIL, NOW, fill, with_database
from cairn.store import open_store
from cairn.store.postgres import PostgresStore
from cairn.store.records import NewTask
from cairn.store.sqlbase import SQLStore


def new_database(url: str, name: str) -> str:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    return with_database(url, name)


def drop_database(url: str, name: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def drain_seconds(store: SQLStore, count: int) -> float:
    """Seconds to claim ``count`` tasks the way a worker does, one claim each."""
    started = time.perf_counter()
    for _ in range(count):
        claimed = store.claim_next_pending(None, "bench", LEASE_UNTIL, NOW, names=["job"])
        assert claimed is not None, "the drain ran out of tasks"
    return time.perf_counter() - started


def one_round(url: str, cancelled: int, drain: int) -> float:
    """One store: ``cancelled`` tasks cancelled (if any), then a timed drain."""
    name = f"cairn_bench_drain_{cancelled}"
    store = open_store(new_database(url, name))
    assert isinstance(store, SQLStore)
    try:
        if cancelled:
            fill(store, 0, cancelled)  # batch "b", every task pending
            store.cancel_batch("b", "pending", NOW)
        store.ensure_batch("d", "job", NOW)
        store.enqueue(
            [
                NewTask(f"d/{n}", "job", "{}", "json", batch="d", item_key=str(n))
                for n in range(drain)
            ],
            NOW,
        )
        return drain_seconds(store, drain)
    finally:
        store.close()
        drop_database(url, name)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--url", required=True, help="a PostgreSQL server's maintenance URL")
    parser.add_argument("--cancelled", type=int, default=100_000)
    parser.add_argument("--drain", type=int, default=400)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-refresh", action="store_true", help="leave statistics stale")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.no_refresh:
        PostgresStore.refresh_task_statistics = None
    empty: list[float] = []
    after: list[float] = []
    for _ in range(args.runs):
        empty.append(one_round(args.url, 0, args.drain))
        after.append(one_round(args.url, args.cancelled, args.drain))
    floor, case = median(empty), median(after)
    label = "stale statistics" if args.no_refresh else "refreshed statistics"
    print(
        table(
            ["store", f"drain of {args.drain} (s, median)", "spread", "ratio"],
            [
                ["empty (floor)", f"{floor:.3f}", spread(empty), "1.00x"],
                [
                    f"after cancelling {args.cancelled:,} ({label})",
                    f"{case:.3f}",
                    spread(after),
                    fmt_ratio(ratio(case, floor)),
                ],
            ],
        )
    )


if __name__ == "__main__":
    main()
