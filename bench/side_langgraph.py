"""Side by side (2b): one LangGraph thread of 1,000 turns, on cairn's checkpointer
and on LangGraph's own SqliteSaver.

The graph, the messages and the measurements are section (2)'s
(``bench.side_conversation``): a one-node ``StateGraph(MessagesState)`` whose
node returns the reply, a turn is ``graph.invoke`` with the user message
(~120 + ~400 characters a turn, ``bench.conversation.message_pair``), default
durability; no model is called. Only the checkpointer changes:

* ``CairnSaver`` on a cairn SQLite store (``cairn.integrations.langgraph``), at
  cairn's default ``synchronous=NORMAL`` and at ``FULL`` (SqliteSaver's);
* ``SqliteSaver`` as its docs show it (WAL, ``synchronous=FULL``).

Measured: bytes on disk over the message text, and for CairnSaver at NORMAL
how they split between its three tables and the rest of the file (SQLite's
``dbstat``); time per turn, median of the
first and of the last 10% of turns (100 of 1,000), so a time that grows with the
thread shows as last/first above 1; the load of the latest state
(``graph.get_state``), for cairn through a new ``CairnSaver`` each time, so it
rebuilds the messages from their rows as a restarted process does.

    .venv/bin/python -m bench --only langgraph [--turns 1000] [--runs 3]
"""

from __future__ import annotations

import sqlite3
import statistics
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from bench import _peers
from bench.side_conversation import (
    Contender,
    Growth,
    Runner,
    file_bytes,
    graph_growth,
    langgraph_runner,
    report,
    run_rounds,
)
from cairn.store.sqlite import SQLiteStore, Synchronous

CAIRN_DEFAULT = "cairn CairnSaver NORMAL (default)"
CAIRN_FULL = "cairn CairnSaver FULL"
TABLES = ("cairn_lg_blobs", "cairn_lg_checkpoints", "cairn_lg_writes")
# Per thread size, each round's bytes per checkpointer table (and the rest of
# the file), from the NORMAL runs: where the bytes over the text go.
_split: dict[int, list[dict[str, int]]] = {}


def cairn_runner(synchronous: Synchronous) -> Runner:
    def run(path: Path, turns: int) -> Growth:
        from cairn.integrations.langgraph import CairnSaver

        store = SQLiteStore(path, synchronous=synchronous)
        try:
            # Each load through a new saver: no cache, as SqliteSaver has none.
            fresh = partial(CairnSaver, store)
            timings, load_ms, loaded = graph_growth(CairnSaver(store), turns, fresh)
        finally:
            store.close()
        disk = file_bytes(path)
        if synchronous == "NORMAL":
            _split.setdefault(turns, []).append(table_bytes(path, disk))
        return Growth(disk, timings, load_ms, loaded)

    return run


def main(workdir: Path, runs: int, sizes: Sequence[int]) -> str:
    if not (_peers.installed("langgraph") and _peers.installed("langgraph-checkpoint-sqlite")):
        return _peers.missing_note("langgraph / langgraph-checkpoint-sqlite") + "\n"
    found = [
        Contender(CAIRN_DEFAULT, cairn_runner("NORMAL")),
        Contender(CAIRN_FULL, cairn_runner("FULL")),
        Contender("LangGraph SqliteSaver", langgraph_runner),
    ]
    run_rounds(found, workdir, runs, sizes)
    title = "(2b) one LangGraph thread: CairnSaver vs SqliteSaver, one message pair a turn"
    return report(found, runs, sizes, title=title, baseline=CAIRN_FULL) + split_report(sizes)


def table_bytes(path: Path, disk: int) -> dict[str, int]:
    """The pages (bytes) of each checkpointer table, its primary key's b-tree
    included (they are WITHOUT ROWID), and of the rest of the file."""
    conn = sqlite3.connect(path)
    try:
        marks = ", ".join("?" for _ in TABLES)
        statement = f"SELECT name, SUM(pgsize) FROM dbstat WHERE name IN ({marks}) GROUP BY name"
        found = {name: int(size) for name, size in conn.execute(statement, TABLES)}
    finally:
        conn.close()
    return {**found, "rest of the file": disk - sum(found.values())}


def split_report(sizes: Sequence[int]) -> str:
    """Where CairnSaver's bytes go (NORMAL), as MB and a share of the file."""
    lines = ["", "CairnSaver NORMAL, bytes per table (SQLite dbstat), median of the rounds:", ""]
    lines += ["| turns | table | MB | share of the file |", "|---|---|---|---|"]
    for turns in sizes:
        rounds = _split.get(turns, [])
        if not rounds:
            continue
        total = statistics.median(sum(r.values()) for r in rounds)
        for name in (*TABLES, "rest of the file"):
            size = statistics.median(r.get(name, 0) for r in rounds)
            lines.append(f"| {turns:,} | {name} | {size / 1e6:.2f} | {size / total:.0%} |")
    return "\n".join(lines) + "\n"
