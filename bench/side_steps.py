"""Side by side (1): what one durable step costs in cairn and in DBOS Transact.

The task is the one ``bench.step_overhead`` and ``bench.postgres`` time: N trivial
steps in one task (cairn) or one workflow (DBOS), timed whole (create the task or
workflow, the steps, finish), per step. Every contender runs once per round, in
the same order, each on a fresh SQLite file, so drift on a shared machine touches
all of them alike; ratios are taken per round, then the median over rounds.

SQLite, in three settings:

* WAL + ``synchronous=NORMAL`` (cairn's default) on both sides;
* WAL + ``synchronous=FULL`` on both sides;
* each library's default: cairn's (WAL, NORMAL) against DBOS's (SQLite's rollback
  journal, ``synchronous=FULL``).

The floors are raw ``sqlite3`` INSERT + commit of a 4-column row in the same
journal mode and ``synchronous`` (``bench.step_overhead.raw_commits``, plus the
rollback-journal variant here). PostgreSQL: one throwaway database
(``bench_peers_<pid>``) holds the floor's table (``bench.postgres.raw_commits``),
cairn's schema and DBOS's system schema; the server's own settings apply to all.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench import _peers, peer_dbos, step_overhead
from bench._stats import fmt_ratio, median, ratio, spread, table
from cairn.store.sqlite import Synchronous

SQLITE_FLOORS: dict[str, tuple[str, Synchronous]] = {
    "WAL/NORMAL": ("WAL", "NORMAL"),
    "WAL/FULL": ("WAL", "FULL"),
    "DELETE/FULL": ("DELETE", "FULL"),
}


Timing = tuple[float, float]  # wall seconds, process CPU seconds
Run = Callable[[Path, int, int], Timing]  # (scratch dir, round, steps) -> its timing


@dataclass
class Contender:
    """One line of the table: a runner of one timed task, and the floor it is
    compared with (a key of the same table)."""

    label: str
    floor: str | None  # None for a floor itself
    run: Run
    micros: list[float] = field(default_factory=list)  # wall, per round, per step
    cpu_micros: list[float] = field(default_factory=list)  # process CPU, likewise


@contextmanager
def timed(into: list[float]) -> Iterator[None]:
    """Wall and process CPU seconds of the block (the library's own threads, such
    as a lease heartbeat or a queue poller, count too), appended to ``into``."""
    wall, cpu = time.perf_counter(), time.process_time()
    yield
    into += [time.perf_counter() - wall, time.process_time() - cpu]


# -- the SQLite floors and runners ---------------------------------------------------------
def raw_sqlite(journal: str, synchronous: Synchronous) -> Run:
    """The floor; its CPU is its one thread's (``step_overhead.Span``)."""

    def run(workdir: Path, round_: int, steps: int) -> Timing:
        path = workdir / f"raw-{journal}-{synchronous}-{round_}.db"
        if journal == "WAL":
            span = step_overhead.raw_commits(path, synchronous, steps)
        else:
            span = raw_rollback_journal(path, synchronous, steps)
        return span.wall, span.cpu

    return run


def raw_rollback_journal(path: Path, synchronous: Synchronous, steps: int) -> step_overhead.Span:
    """``step_overhead.raw_commits`` in SQLite's default rollback-journal mode, the
    floor for DBOS's default settings."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = DELETE")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute(step_overhead._RAW_SCHEMA)
        insert = "INSERT INTO steps (task_id, seq, name, output) VALUES (?, ?, ?, ?)"
        mark = step_overhead._mark()
        for i in range(steps):
            conn.execute(insert, (step_overhead.TASK_ID, i + 1, "s", str(i)))
        return step_overhead._since(mark)
    finally:
        conn.close()


def cairn_sqlite(synchronous: Synchronous) -> Run:
    """``step_overhead``'s app and task, its whole ``app.run`` timed."""

    def run(workdir: Path, round_: int, steps: int) -> Timing:
        path = workdir / f"cairn-{synchronous}-{round_}.db"
        app, task = step_overhead.open_app(path, synchronous)
        found: list[float] = []
        try:
            with timed(found):
                app.run(task, task_id=step_overhead.TASK_ID, n=steps)
        finally:
            app.close()
        return found[0], found[1]

    return run


def dbos_sqlite(journal: str | None, synchronous: Synchronous | None) -> Run:
    """DBOS on a fresh SQLite file; ``None`` keeps DBOS's (and SQLite's) default."""

    def run(workdir: Path, round_: int, steps: int) -> Timing:
        path = workdir / f"dbos-{journal}-{synchronous}-{round_}.sqlite"
        url = peer_dbos.prepare_sqlite(path, journal)
        with peer_dbos.launched(url, synchronous):
            timing = peer_dbos.run_workflow(steps)
        expected = (journal or "delete").lower()
        if peer_dbos.sqlite_settings(path) != expected:
            raise SystemExit(f"DBOS's file is not in {expected} mode")
        return timing

    return run


def sqlite_contenders(with_dbos: bool) -> list[Contender]:
    found = [
        Contender(f"raw commit {name} (floor)", None, raw_sqlite(*mode))
        for name, mode in SQLITE_FLOORS.items()
    ]
    found += [
        Contender("cairn WAL/NORMAL (cairn default)", "WAL/NORMAL", cairn_sqlite("NORMAL")),
        Contender("cairn WAL/FULL", "WAL/FULL", cairn_sqlite("FULL")),
    ]
    if with_dbos:
        found += [
            Contender("DBOS WAL/NORMAL", "WAL/NORMAL", dbos_sqlite("WAL", "NORMAL")),
            Contender("DBOS WAL/FULL", "WAL/FULL", dbos_sqlite("WAL", "FULL")),
            Contender("DBOS DELETE/FULL (DBOS default)", "DELETE/FULL", dbos_sqlite(None, None)),
        ]
    return found


# -- PostgreSQL ------------------------------------------------------------------------------
@contextmanager
def postgres_contenders(admin_url: str, with_dbos: bool) -> Iterator[tuple[str, list[Contender]]]:
    """The PostgreSQL contenders, sharing one throwaway database and, for cairn
    and DBOS, one open store / one launched DBOS for all rounds."""
    from bench import postgres
    from cairn import Cairn

    with ExitStack() as stack:
        url = stack.enter_context(scratch_database(admin_url, "steps"))
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(postgres.raw_schema("durable"))
        app = stack.enter_context(Cairn(f"{url}?schema=cairn_steps"))
        task = app.task(name="overhead")(postgres.overhead)
        _ = app.store  # opened before timing, as the floor's table is created before

        def raw(_dir: Path, round_: int, steps: int) -> Timing:
            span = postgres.raw_commits(url, "durable", round_, steps)
            return span.wall, span.cpu

        def cairn(_dir: Path, round_: int, steps: int) -> Timing:
            found: list[float] = []
            with timed(found):
                app.run(task, task_id=f"overhead/{round_}", n=steps)
            return found[0], found[1]

        found = [
            Contender("raw commit PostgreSQL (floor)", None, raw),
            Contender("cairn PostgreSQL", "PostgreSQL", cairn),
        ]
        if with_dbos:
            stack.enter_context(peer_dbos.launched(url))

            def dbos(_dir: Path, _round: int, steps: int) -> Timing:
                return peer_dbos.run_workflow(steps)

            found.append(Contender("DBOS PostgreSQL", "PostgreSQL", dbos))
        yield postgres.server_settings(url), found


@contextmanager
def scratch_database(admin_url: str, purpose: str) -> Iterator[str]:
    """A new database ``bench_peers_<purpose>_<pid>``, dropped afterwards."""
    import os

    import psycopg

    from bench.postgres import with_database

    name = f"bench_peers_{purpose}_{os.getpid()}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield with_database(admin_url, name)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


# -- rounds and the table ----------------------------------------------------------------------
def run_rounds(contenders: Sequence[Contender], workdir: Path, runs: int, steps: int) -> None:
    for round_ in range(runs):
        for contender in contenders:
            wall, cpu = contender.run(workdir, round_, steps)
            contender.micros.append(wall * 1e6 / steps)
            contender.cpu_micros.append(cpu * 1e6 / steps)
        for stale in workdir.iterdir():  # fresh files each round; keep the disk small
            stale.unlink()


def floor_key(label: str) -> str:
    return label.removeprefix("raw commit ").removesuffix(" (floor)")


def paired(values: Sequence[float], floor: Sequence[float]) -> float:
    return median([ratio(v, f) for v, f in zip(values, floor, strict=True)])


def report(title: str, contenders: Sequence[Contender], runs: int, steps: int) -> str:
    floors = {floor_key(c.label): c for c in contenders if c.floor is None}
    rows = []
    for c in contenders:
        vs_floor = cpu_vs_floor = ""
        if c.floor is not None:
            vs_floor = fmt_ratio(paired(c.micros, floors[c.floor].micros))
            cpu_vs_floor = fmt_ratio(paired(c.cpu_micros, floors[c.floor].cpu_micros))
        rows.append(
            [
                c.label,
                f"{median(c.micros):.1f}",
                spread(c.micros),
                vs_floor,
                f"{median(c.cpu_micros):.1f}",
                cpu_vs_floor,
            ]
        )
    headers = ["contender", "wall us/step", "min..max", "vs floor", "cpu us/step", "cpu vs floor"]
    lines = [
        f"{title}: {steps} trivial steps in one task, {runs} interleaved rounds "
        "(medians; ratios are medians of per-round ratios)",
        table(headers, rows),
    ]
    lines += peer_lines(contenders)
    lines.append("cpu = process CPU time (every thread of the process; a floor has one thread)")
    return "\n".join(lines) + "\n"


# Which DBOS line is compared with which cairn line.
PAIRS = [
    ("DBOS WAL/NORMAL", "cairn WAL/NORMAL (cairn default)"),
    ("DBOS WAL/FULL", "cairn WAL/FULL"),
    ("DBOS DELETE/FULL (DBOS default)", "cairn WAL/NORMAL (cairn default)"),
    ("DBOS PostgreSQL", "cairn PostgreSQL"),
]


def peer_lines(contenders: Sequence[Contender]) -> list[str]:
    by_label = {c.label: c for c in contenders}
    lines = []
    for peer, ours in PAIRS:
        if peer in by_label and ours in by_label:
            wall = paired(by_label[peer].micros, by_label[ours].micros)
            cpu = paired(by_label[peer].cpu_micros, by_label[ours].cpu_micros)
            lines.append(
                f"{peer} / {ours}: wall {fmt_ratio(wall)}, cpu {fmt_ratio(cpu)} "
                "(above 1: cairn is faster)"
            )
    return lines


def main(workdir: Path, runs: int, steps: int, postgres_url: str | None) -> str:
    with_dbos = _peers.installed("dbos")
    out = [] if with_dbos else [_peers.missing_note("dbos")]
    sqlite_side = sqlite_contenders(with_dbos)
    run_rounds(sqlite_side, workdir, runs, steps)
    out.append(report("(1a) a durable step on SQLite", sqlite_side, runs, steps))
    if postgres_url is None:
        out.append("(1b) PostgreSQL skipped (--no-postgres)\n")
        return "\n".join(out)
    with postgres_contenders(postgres_url, with_dbos) as (settings, pg_side):
        run_rounds(pg_side, workdir, runs, steps)
    out.append(report(f"(1b) a durable step on {settings}", pg_side, runs, steps))
    return "\n".join(out)
