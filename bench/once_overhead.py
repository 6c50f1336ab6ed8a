"""What ``ctx.once`` costs, against the floor of two raw SQLite commits.

An operation is claim (one commit, before the function runs) then record (one
commit: the operation row and the task's history entry together), so its floor
is two raw INSERT+COMMITs in WAL mode with the same ``synchronous``. Runs of
cairn and of the floor alternate, each on a fresh file; the table gives medians
and the ratio of the medians measured in the same run. Target: at most 1.5x.

    .venv/bin/python -m bench.once_overhead [--ops 1000] [--runs 7]
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench._stats import filesystem_of, fmt_ratio, median, ratio, spread, table
from cairn import Cairn, Context, op_key

TARGET = 1.5


def raw_pairs(path: Path, ops: int) -> float:
    """Microseconds for two autocommit INSERTs (two commits) per operation."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("CREATE TABLE claims (key TEXT PRIMARY KEY, status TEXT) WITHOUT ROWID")
    conn.execute("CREATE TABLE records (key TEXT PRIMARY KEY, result TEXT) WITHOUT ROWID")
    started = time.perf_counter()
    for i in range(ops):
        conn.execute("INSERT INTO claims VALUES (?, 'claimed')", (f"pay/{i}",))
        conn.execute("INSERT INTO records VALUES (?, ?)", (f"pay/{i}", str(i)))
    elapsed = time.perf_counter() - started
    conn.close()
    return elapsed / ops * 1e6


def cairn_ops(path: Path, ops: int) -> float:
    """Microseconds per ``ctx.once`` inside one task, timed inside the task."""
    app = Cairn(f"sqlite:///{path}")
    timing: list[float] = []

    def act(key: str, i: int) -> int:
        return i

    @app.task
    def many(ctx: Context, n: int) -> int:
        started = time.perf_counter()
        for i in range(n):
            ctx.once(op_key("pay", i), act, i)
        timing.append(time.perf_counter() - started)
        return n

    app.run(many, n=ops)
    app.close()
    return timing[0] / ops * 1e6


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=1000, help="operations per run")
    parser.add_argument("--runs", type=int, default=7, help="alternating runs of each")
    args = parser.parse_args(argv)
    raw: list[float] = []
    ours: list[float] = []
    with tempfile.TemporaryDirectory(prefix="cairn-bench-once-") as tmp:
        folder = Path(tmp)
        print(f"files on {filesystem_of(folder)}; synchronous=NORMAL; {args.ops} ops per run")
        for run in range(args.runs):
            raw.append(raw_pairs(folder / f"raw{run}.db", args.ops))
            ours.append(cairn_ops(folder / f"cairn{run}.db", args.ops))
    floor, cost = median(raw), median(ours)
    print(
        table(
            ["measure", "us per op", "min..max", "ratio"],
            [
                ["two raw commits (the floor)", f"{floor:.1f}", spread(raw), "1.00x"],
                [
                    "ctx.once (claim + record)",
                    f"{cost:.1f}",
                    spread(ours),
                    fmt_ratio(ratio(cost, floor)),
                ],
            ],
        )
    )
    verdict = "met" if ratio(cost, floor) <= TARGET else "NOT met"
    print(
        f"once / two raw commits = {fmt_ratio(ratio(cost, floor))}: "
        f"target <= {TARGET:.2f}x {verdict}"
    )


if __name__ == "__main__":
    main()
