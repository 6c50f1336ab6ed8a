"""A Prometheus scrape of a large store: how long it takes and how many series it
carries. ``.venv/bin/python -m bench.metrics_scrape [--tasks 100000] [--dir DIR]``

The store is filled with plain SQL (the engine would take minutes for 100,000
tasks): batches of 1,000 tasks, each with three steps (a numbered step
``fetch-N``, a map item ``score[N]``, a model call), every status present, some
tasks interrupted, retried or failed, some running. It starts the exporter's
registry and scrapes it (the first scrape), then adds 1,000 more tasks finished
after the exporter started (the step histograms count from then) and scrapes
five more times; it prints the first scrape's time, the median of the others,
and the series count of the last.
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


def _task_row(pos: int, start: datetime) -> tuple[object, ...]:
    status = STATUSES[pos % len(STATUSES)]
    created = start + timedelta(milliseconds=pos)
    finished = to_iso(created + timedelta(seconds=5)) if status in ("completed", "failed") else None
    error = '{"type": "builtins.ValueError", "message": "bad"}' if status == "failed" else None
    return (
        pos, f"batch-{pos // 1000}/n={pos}", f"batch-{pos // 1000}", "work", "{}", "json",
        status, 1 + (pos % 7 == 0), to_iso(created), to_iso(created), finished,
        to_iso(created), int(pos % 13 == 0), error,
    )  # fmt: skip


def _step_rows(pos: int, start: datetime) -> list[tuple[object, ...]]:
    task_id = f"batch-{pos // 1000}/n={pos}"
    begun = start + timedelta(milliseconds=pos)
    rows: list[tuple[object, ...]] = []
    for seq, (kind, name, seconds) in enumerate(
        [("step", f"fetch-{pos % 50}", 0.2 + pos % 3), ("step", f"score[{pos}]", 1.5),
         ("llm", "answer", 3.0)]
    ):  # fmt: skip
        ended = to_iso(begun + timedelta(seconds=seconds))
        rows.append((task_id, seq, kind, name, "completed", "1", 1 + (pos % 11 == 0), 1, 1,
                     to_iso(begun), ended))  # fmt: skip
    return rows


def fill(path: Path, tasks: int, first: int = 0, start: datetime = START) -> None:
    """Tasks ``first`` to ``first + tasks - 1``, created from ``start`` on."""
    if first == 0:
        app = Cairn(f"sqlite:///{path}")
        assert app.store is not None  # opening it applies the migrations
        app.close()
    positions = range(first, first + tasks)
    with sqlite3.connect(path) as db:
        db.executemany(
            "INSERT INTO batches (name, task_name, created_at) VALUES (?, 'work', ?)",
            [
                (f"batch-{b}", to_iso(start))
                for b in range(first // 1000, (first + tasks - 1) // 1000 + 1)
            ],
        )
        db.executemany(
            "INSERT INTO tasks (pos, id, batch, name, args, codec, status, attempts, created_at, "
            "started_at, finished_at, updated_at, interruptions, error) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (_task_row(pos, start) for pos in positions),
        )
        db.executemany(
            "INSERT INTO steps (task_id, seq, kind, name, status, output, attempts, "
            "task_attempt, run_attempts, started_at, finished_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (row for pos in positions for row in _step_rows(pos, start)),
        )


def scrape(path: Path, tasks: int, rounds: int = 5) -> tuple[float, float, int, bytes]:
    """The first scrape's seconds, the median of ``rounds`` more after 1,000 new
    tasks, the series of the last and its text."""
    from prometheus_client import generate_latest

    from cairn.observe.prometheus import registry_for
    from cairn.store.reports import Window

    app = Cairn(f"sqlite:///{path}")
    try:
        registry = registry_for(app.store, Window(), app.clock.now)
        began = time.perf_counter()
        generate_latest(registry)
        first = time.perf_counter() - began
        fill(path, 1000, first=tasks, start=app.clock.now())
        times, text = [], b""
        for _ in range(rounds):
            began = time.perf_counter()
            text = generate_latest(registry)
            times.append(time.perf_counter() - began)
    finally:
        app.close()
    series = sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))
    return first, statistics.median(times), series, text


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.metrics_scrape")
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None, help="write the last scrape here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        path = Path(scratch) / "big.db"
        fill(path, args.tasks)
        first, later, series, text = scrape(path, args.tasks)
        if args.out is not None:
            args.out.write_bytes(text)
    print(
        f"{args.tasks} tasks: first scrape {first * 1000:.0f} ms; with 1,000 more tasks "
        f"finished since: scrape median {later * 1000:.0f} ms, {series} series"
    )


if __name__ == "__main__":
    main()
