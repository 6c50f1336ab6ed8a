"""A Prometheus scrape of a large store: how long it takes and how many series it
carries. ``.venv/bin/python -m bench.metrics_scrape [--tasks 100000] [--dir DIR]``

The store is filled with plain SQL (the engine would take minutes for 100,000
tasks): batches of 1,000 tasks, each with three steps (a numbered step
``fetch-N``, a map item ``score[N]``, a model call), every status present, some
tasks interrupted, retried or failed, some running. Then it scrapes the
exporter's registry six times and prints the first scrape's time (it reads every
step once), the median of the others, and the series count.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cairn import Cairn
from cairn.clock import to_iso

START = datetime(2026, 5, 24, tzinfo=UTC)
STATUSES: tuple[str, ...] = (
    ("completed",) * 90 + ("failed",) * 4 + ("running",) * 2 + ("pending", "waiting")
) + ("cancelled",) * 2


def _task_row(pos: int) -> tuple[object, ...]:
    status = STATUSES[pos % len(STATUSES)]
    created = START + timedelta(seconds=pos)
    finished = to_iso(created + timedelta(seconds=5)) if status in ("completed", "failed") else None
    error = '{"type": "builtins.ValueError", "message": "bad"}' if status == "failed" else None
    return (
        pos, f"batch-{pos // 1000}/n={pos}", f"batch-{pos // 1000}", "work", "{}", "json",
        status, 1 + (pos % 7 == 0), to_iso(created), to_iso(created), finished,
        to_iso(created), int(pos % 13 == 0), error,
    )  # fmt: skip


def _step_rows(pos: int) -> list[tuple[object, ...]]:
    task_id = f"batch-{pos // 1000}/n={pos}"
    begun = START + timedelta(seconds=pos)
    rows: list[tuple[object, ...]] = []
    for seq, (kind, name, seconds) in enumerate(
        [("step", f"fetch-{pos % 50}", 0.2 + pos % 3), ("step", f"score[{pos}]", 1.5),
         ("llm", "answer", 3.0)]
    ):  # fmt: skip
        ended = to_iso(begun + timedelta(seconds=seconds))
        rows.append((task_id, seq, kind, name, "completed", "1", 1 + (pos % 11 == 0), 1, 1,
                     to_iso(begun), ended))  # fmt: skip
    return rows


def fill(path: Path, tasks: int) -> None:
    app = Cairn(f"sqlite:///{path}")
    assert app.store is not None  # opening it applies the migrations
    app.close()
    with sqlite3.connect(path) as db:
        db.executemany(
            "INSERT INTO batches (name, task_name, created_at) VALUES (?, 'work', ?)",
            [(f"batch-{b}", to_iso(START)) for b in range(tasks // 1000 + 1)],
        )
        db.executemany(
            "INSERT INTO tasks (pos, id, batch, name, args, codec, status, attempts, created_at, "
            "started_at, finished_at, updated_at, interruptions, error) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (_task_row(pos) for pos in range(tasks)),
        )
        db.executemany(
            "INSERT INTO steps (task_id, seq, kind, name, status, output, attempts, "
            "task_attempt, run_attempts, started_at, finished_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (row for pos in range(tasks) for row in _step_rows(pos)),
        )


def scrape(path: Path, rounds: int = 6) -> tuple[float, float, int, bytes]:
    from prometheus_client import generate_latest

    from cairn.observe.prometheus import registry_for
    from cairn.store.reports import Window

    app = Cairn(f"sqlite:///{path}")
    try:
        registry = registry_for(app.store, Window(), app.clock.now)
        times, text = [], b""
        for _ in range(rounds):
            began = time.perf_counter()
            text = generate_latest(registry)
            times.append(time.perf_counter() - began)
    finally:
        app.close()
    series = sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))
    return times[0], statistics.median(times[1:]), series, text


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.metrics_scrape")
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None, help="write the last scrape here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        path = Path(scratch) / "big.db"
        fill(path, args.tasks)
        first, later, series, text = scrape(path)
        if args.out is not None:
            args.out.write_bytes(text)
    print(
        f"{args.tasks} tasks: first scrape {first * 1000:.0f} ms, later scrapes median "
        f"{later * 1000:.0f} ms, {series} series"
    )


if __name__ == "__main__":
    main()
