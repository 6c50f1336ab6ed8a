"""Side by side (2b): one LangGraph thread of 1,000 turns, on cairn's checkpointer
(format 3, and format 1 as cairn shipped it before) and on LangGraph's own
SqliteSaver.

The graph and the measurements are section (2)'s (``bench.side_conversation``):
a one-node ``StateGraph(MessagesState)`` whose node returns the reply, a turn is
``graph.invoke`` with the user message, default durability; no model is
called. The messages are not section (2)'s template (a fixed text with the turn
number in it, which a store that compresses rows against earlier rows would
keep for almost nothing) but consecutive, distinct chunks of the repository's
own prose, ~120 + ~400 characters a turn (``bench.prose``). Only the
checkpointer changes:

* ``CairnSaver`` (format 3) on a cairn SQLite store, at cairn's default
  ``synchronous=NORMAL`` and at ``FULL`` (SqliteSaver's);
* format 1, the saver cairn shipped before (kept frozen under
  ``tests/integration/langgraph/format1``), at NORMAL;
* ``SqliteSaver`` as its docs show it (WAL, ``synchronous=FULL``);
* with a PostgreSQL server (``--postgres-url``), format 3 and format 1 again,
  each on a new database.

Measured: bytes over the message text, of the whole SQLite file and of the
checkpointer's own tables (SQLite's ``dbstat``; PostgreSQL's
``pg_total_relation_size``, indexes included); time per turn, median of the
first and of the last 10% of turns (100 of 1,000), so a time that grows with the
thread shows as last/first above 1; the load of the latest state
(``graph.get_state``), for cairn through a new saver each time, so it reads the
thread from its rows as a restarted process does.

    .venv/bin/python -m bench --only langgraph [--lg-turns 1000] [--runs 3]
"""

from __future__ import annotations

import sqlite3
import statistics
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from bench import _peers
from bench._stats import fmt_ratio, median, ratio, table
from bench.prose import message_pair
from bench.side_conversation import file_bytes, graph_growth
from cairn.store.sqlite import SQLiteStore, Synchronous

FORMAT3 = ("cairn_lg_rows", "cairn_lg_rows_place", "cairn_lg_places", "cairn_lg_meta")
FORMAT1 = ("cairn_lg_blobs", "cairn_lg_checkpoints", "cairn_lg_writes", "cairn_lg_meta")


@dataclass(frozen=True, slots=True)
class Measured:
    file: int | None  # the SQLite file; None on PostgreSQL
    tables: dict[str, int]  # bytes of each checkpointer table
    turn_us: list[float]
    load_ms: float
    loaded: int

    def first_us(self) -> float:
        return statistics.median(self.turn_us[: max(1, len(self.turn_us) // 10)])

    def last_us(self) -> float:
        return statistics.median(self.turn_us[-max(1, len(self.turn_us) // 10) :])


Run = Callable[[Path, int], Measured]


@dataclass
class Contender:
    label: str
    run: Run
    found: dict[int, list[Measured]] = field(default_factory=dict)


def text_bytes(turns: int) -> int:
    """The message text itself, UTF-8: what no store can go below."""
    return sum(len(m["content"].encode()) for i in range(turns) for m in message_pair(i))


def saver_class(format_: int) -> Any:
    if format_ == 3:
        from cairn.integrations.langgraph import CairnSaver

        return CairnSaver
    from tests.integration.langgraph.format1 import CairnSaver as Format1Saver

    return Format1Saver


def cairn_sqlite(format_: int, synchronous: Synchronous) -> Run:
    def run(path: Path, turns: int) -> Measured:
        saver = saver_class(format_)
        store = SQLiteStore(path, synchronous=synchronous)
        try:
            # Each load through a new saver: no cache, as SqliteSaver has none.
            growth = graph_growth(saver(store), turns, partial(saver, store), message_pair)
        finally:
            store.close()
        disk = file_bytes(path)
        return Measured(disk, sqlite_tables(path, FORMAT3 if format_ == 3 else FORMAT1), *growth)

    return run


def sqlite_tables(path: Path, names: Sequence[str]) -> dict[str, int]:
    """The pages (bytes) of each table and index in ``names``."""
    conn = sqlite3.connect(path)
    try:
        marks = ", ".join("?" for _ in names)
        statement = f"SELECT name, SUM(pgsize) FROM dbstat WHERE name IN ({marks}) GROUP BY name"
        return {name: int(size) for name, size in conn.execute(statement, tuple(names))}
    finally:
        conn.close()


def sqlite_saver(path: Path, turns: int) -> Measured:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(path, check_same_thread=False)  # as the saver's docs show
    try:
        growth = graph_growth(SqliteSaver(conn), turns, None, message_pair)
    finally:
        conn.close()
    tables = sqlite_tables(path, ("checkpoints", "writes"))
    return Measured(file_bytes(path), tables, *growth)


def cairn_postgres(format_: int, admin_url: str) -> Run:
    def run(_: Path, turns: int) -> Measured:
        from bench.side_steps import scratch_database
        from cairn.store import open_store

        saver = saver_class(format_)
        with scratch_database(admin_url, f"lg{format_}") as url:
            store = open_store(url)
            try:
                growth = graph_growth(saver(store), turns, partial(saver, store), message_pair)
                return Measured(None, postgres_tables(store), *growth)
            finally:
                store.close()

    return run


def postgres_tables(store: Any) -> dict[str, int]:
    """Bytes of each checkpointer table, with its indexes and TOAST."""
    statement = (
        "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c"
        " WHERE c.relname LIKE ? AND c.relkind = 'r'"
    )
    return {str(name): int(size) for name, size in store._exec(statement, ("cairn_lg_%",)).rows}


def contenders(postgres_url: str | None) -> Iterator[Contender]:
    yield Contender("CairnSaver format 3 NORMAL (default)", cairn_sqlite(3, "NORMAL"))
    yield Contender("CairnSaver format 3 FULL", cairn_sqlite(3, "FULL"))
    yield Contender("CairnSaver format 1 NORMAL", cairn_sqlite(1, "NORMAL"))
    yield Contender("LangGraph SqliteSaver (FULL)", sqlite_saver)
    if postgres_url is not None:
        yield Contender("CairnSaver format 3 PostgreSQL", cairn_postgres(3, postgres_url))
        yield Contender("CairnSaver format 1 PostgreSQL", cairn_postgres(1, postgres_url))


def run_rounds(found: Sequence[Contender], workdir: Path, runs: int, sizes: Sequence[int]) -> None:
    for round_ in range(runs):
        for turns in sizes:
            for number, contender in enumerate(found):
                path = workdir / f"lg-{number}-{turns}-{round_}.db"
                with _cleaned(workdir):
                    contender.found.setdefault(turns, []).append(contender.run(path, turns))


@contextmanager
def _cleaned(workdir: Path) -> Iterator[None]:
    try:
        yield
    finally:
        for stale in workdir.iterdir():  # SqliteSaver's file reaches gigabytes
            stale.unlink()


def report(found: Sequence[Contender], runs: int, sizes: Sequence[int]) -> str:
    headers = [
        "contender",
        "turns",
        "MB file",
        "x text",
        "MB tables",
        "x text",
        "turn us first10%",
        "last10%",
        "last/first",
        "load ms",
        "msgs",
    ]
    rows = []
    for turns in sizes:
        text = text_bytes(turns)
        for c in found:
            done = c.found[turns]
            files = [m.file for m in done if m.file is not None]
            tables = median([sum(m.tables.values()) for m in done])
            file_cells = ["-", "-"]
            if files:
                file_cells = [f"{median(files) / 1e6:.2f}", fmt_ratio(ratio(median(files), text))]
            rows.append(
                [
                    c.label,
                    str(turns),
                    *file_cells,
                    f"{tables / 1e6:.2f}",
                    fmt_ratio(ratio(tables, text)),
                    f"{median([m.first_us() for m in done]):.0f}",
                    f"{median([m.last_us() for m in done]):.0f}",
                    fmt_ratio(median([ratio(m.last_us(), m.first_us()) for m in done])),
                    f"{median([m.load_ms for m in done]):.1f}",
                    str(done[0].loaded),
                ]
            )
    title = (
        f"(2b) one LangGraph thread, one message pair a turn (distinct prose), {runs} "
        "interleaved round(s) (medians); x text = bytes / UTF-8 message text"
    )
    return "\n".join([title, table(headers, rows), split_report(found, sizes)]) + "\n"


def split_report(found: Sequence[Contender], sizes: Sequence[int]) -> str:
    """Each cairn contender's bytes per table, over the text (medians)."""
    lines = ["", "bytes per checkpointer table, over the text (medians of the rounds):", ""]
    lines += ["| contender | turns | table | MB | x text |", "|---|---|---|---|---|"]
    for turns in sizes:
        text = text_bytes(turns)
        for c in found:
            names = sorted({name for m in c.found[turns] for name in m.tables})
            for name in names:
                size = median([m.tables.get(name, 0) for m in c.found[turns]])
                lines.append(
                    f"| {c.label} | {turns:,} | {name} | {size / 1e6:.2f} | {size / text:.2f}x |"
                )
    return "\n".join(lines)


def main(workdir: Path, runs: int, sizes: Sequence[int], postgres_url: str | None = None) -> str:
    if not (_peers.installed("langgraph") and _peers.installed("langgraph-checkpoint-sqlite")):
        return _peers.missing_note("langgraph / langgraph-checkpoint-sqlite") + "\n"
    found = list(contenders(postgres_url))
    run_rounds(found, workdir, runs, sizes)
    return report(found, runs, sizes)
