"""What a durable conversation costs: bytes per turn, append time, active-context load.

One task per size runs ``turns`` turns of one user message (~120 characters) and
one assistant message (~400 characters), each a ``conv.append``, then
``conv.compact()`` (the offline extractive summarizer, threshold 8,000 tokens,
keep_tail 2,000: the defaults). Measured, for 200, 1,000 and 5,000 turns:

* bytes stored per turn: the messages table and its indexes (SQLite's dbstat),
  against the raw message text (the content characters, UTF-8) and against the
  messages as compact JSON;
* µs per append, median of the first 10% of appends and of the last 10%;
* time to load the active context at the end (``load_conversation``: what a
  resumed ``ctx.conversation`` reads), median of 50 loads.

    .venv/bin/python -m bench.conversation [--turns 200 1000 5000] [--dir DIR]

Targets (from the issue): bytes <= 1.5x the raw message text; the last 10% of
appends within 1.2x of the first 10%; the active-context load flat in turns.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench._stats import filesystem_of, fmt_ratio, ratio, table
from cairn import Cairn, Context
from cairn.agent import assistant, load_conversation, user
from cairn.agent.messages import dumps

TASK_ID = "bench/conversation"
USER = (
    "Please look at the next section of the quarterly report and tell me what changed, "
    "turn {i:05d}."
)
ANSWER = (
    "In section {i} the revenue figures moved: the northern region grew by {a} percent "
    "while the southern region fell by {b} percent, mostly because two large customers "
    "delayed their orders to the next quarter. Costs stayed flat. I recorded the "
    "numbers in the working notes and will compare them with the forecast next, "
    "then check whether the delayed orders were confirmed by the sales team."
)
_MESSAGE_TABLES = ("messages", "messages_summaries", "sqlite_autoindex_messages_1")


@dataclass
class Result:
    turns: int
    bytes_per_turn: float
    text_per_turn: float
    json_per_turn: float
    first_us: float
    last_us: float
    load_ms: float
    compactions: int


def message_pair(i: int) -> tuple[dict[str, str], dict[str, object]]:
    return user(USER.format(i=i)), assistant(ANSWER.format(i=i, a=i % 17, b=i % 11))


def run_one(directory: Path, turns: int) -> Result:
    path = directory / f"conv-{turns}.db"
    app = Cairn(f"sqlite:///{path}")
    timings: list[float] = []
    text_bytes = json_bytes = 0

    @app.task(name="bench")
    def bench(ctx: Context) -> int:
        nonlocal text_bytes, json_bytes
        conv = ctx.conversation("main", system="You analyse quarterly reports.")
        compactions = 0
        for i in range(turns):
            for message in message_pair(i):
                text_bytes += len(str(message["content"]).encode())
                json_bytes += len(dumps(message).encode())
                start = time.perf_counter()
                conv.append(message)
                timings.append(time.perf_counter() - start)
            compactions += conv.compact() is not None
        return compactions

    with app:
        compactions = app.run(bench, task_id=TASK_ID)
        load_ms = _load_ms(app)
    decile = max(1, len(timings) // 10)
    return Result(
        turns,
        _table_bytes(path) / turns,
        text_bytes / turns,
        json_bytes / turns,
        statistics.median(timings[:decile]) * 1e6,
        statistics.median(timings[-decile:]) * 1e6,
        load_ms,
        compactions,
    )


def _load_ms(app: Cairn) -> float:
    loads = []
    for _ in range(50):
        start = time.perf_counter()
        view = load_conversation(app.store, TASK_ID)
        loads.append(time.perf_counter() - start)
        assert view is not None
    return statistics.median(loads) * 1e3


def _table_bytes(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        marks = ", ".join("?" for _ in _MESSAGE_TABLES)
        row = conn.execute(
            f"SELECT SUM(pgsize) FROM dbstat WHERE name IN ({marks})", _MESSAGE_TABLES
        ).fetchone()
    finally:
        conn.close()
    return int(row[0] or 0)


def raw_commit_us(directory: Path, count: int = 2000) -> float:
    """The floor: the median µs of a plain INSERT of a message-sized row, each its own
    commit, into a table keyed like ``messages``, in WAL mode with synchronous=NORMAL."""
    conn = sqlite3.connect(directory / "raw.db", isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute(
            "CREATE TABLE messages (task_id TEXT, conv TEXT, idx INTEGER, content TEXT, "
            "PRIMARY KEY (task_id, conv, idx))"
        )
        timings = []
        for i in range(count):
            content = dumps(message_pair(i)[i % 2])
            start = time.perf_counter()
            conn.execute("INSERT INTO messages VALUES (?, ?, ?, ?)", (TASK_ID, "main", i, content))
            timings.append(time.perf_counter() - start)
    finally:
        conn.close()
    return statistics.median(timings) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, nargs="+", default=[200, 1000, 5000])
    parser.add_argument("--dir", type=Path, default=None)
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=options.dir) as tmp:
        directory = Path(tmp)
        print(f"store on {filesystem_of(directory)}")
        results = [run_one(directory, turns) for turns in options.turns]
        floor = raw_commit_us(directory)
    print(f"raw INSERT commit (the floor): {floor:.1f} µs")
    rows = [
        [
            str(r.turns),
            f"{r.bytes_per_turn:.0f}",
            f"{r.text_per_turn:.0f}",
            fmt_ratio(ratio(r.bytes_per_turn, r.text_per_turn)),
            fmt_ratio(ratio(r.bytes_per_turn, r.json_per_turn)),
            f"{r.first_us:.1f}",
            f"{r.last_us:.1f}",
            fmt_ratio(ratio(r.last_us, r.first_us)),
            f"{r.load_ms:.2f}",
            str(r.compactions),
        ]
        for r in results
    ]
    headers = [
        "turns",
        "bytes/turn",
        "text/turn",
        "vs text",
        "vs JSON",
        "append µs first10%",
        "last10%",
        "last/first",
        "load ms",
        "compactions",
    ]
    print(table(headers, rows))
    print(json.dumps([r.__dict__ for r in results]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
