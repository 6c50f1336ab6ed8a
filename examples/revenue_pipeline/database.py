"""The revenue database: a SQLite file behind a connection limit, like a server's.

A database server accepts only so many connections at once (PostgreSQL's
``max_connections``); one more is refused with "too many clients". ``Database``
enforces that limit per file within the process, which is where the pipeline's
threads share it, and logs every operation in a ``calls`` table of the same
file, so tests (and you) can count what ran, even across processes.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS daily_revenue (
    day TEXT NOT NULL, country TEXT NOT NULL, revenue_micros INTEGER NOT NULL,
    PRIMARY KEY (day, country));
CREATE TABLE IF NOT EXISTS daily_installs (
    day TEXT NOT NULL, store TEXT NOT NULL, app TEXT NOT NULL, installs INTEGER NOT NULL,
    PRIMARY KEY (day, store, app));
CREATE TABLE IF NOT EXISTS calls (op TEXT NOT NULL, key TEXT NOT NULL);
"""

_open: Counter[str] = Counter()  # connections open now, per database file
_open_lock = threading.Lock()


class TooManyConnections(Exception):
    """The database refused a connection: as many as it allows are open."""


class Database:
    """The pipeline's database at ``path``, allowing ``max_connections`` at once."""

    def __init__(self, path: Path, *, max_connections: int = 8, latency: float = 0.0) -> None:
        self.path = path
        self.max_connections = max_connections
        self.latency = latency

    @contextmanager
    def connect(self) -> Iterator[sqlite3.Connection]:
        """One connection, refused if ``max_connections`` are already open."""
        name = str(self.path.resolve())
        with _open_lock:
            if _open[name] >= self.max_connections:
                raise TooManyConnections(
                    f"{self.path.name}: sorry, too many clients already "
                    f"({self.max_connections} connections open)"
                )
            _open[name] += 1
        try:
            with closing(sqlite3.connect(self.path, timeout=30)) as conn, conn:
                conn.executescript(SCHEMA)
                yield conn
        finally:
            with _open_lock:
                _open[name] -= 1

    # -- what the pipeline does ------------------------------------------------------------
    def upsert_day(
        self,
        day: str,
        revenue: Mapping[str, int],
        installs: Mapping[str, Mapping[str, int]],
    ) -> int:
        """Insert or replace the day's rows; returns how many rows were written."""
        with self.connect() as conn:
            conn.execute("INSERT INTO calls VALUES ('upsert', ?)", (day,))
            conn.executemany(
                "INSERT INTO daily_revenue VALUES (?, ?, ?) ON CONFLICT (day, country) "
                "DO UPDATE SET revenue_micros = excluded.revenue_micros",
                [(day, country, micros) for country, micros in revenue.items()],
            )
            rows = [(day, s, app, n) for s, apps in installs.items() for app, n in apps.items()]
            conn.executemany(
                "INSERT INTO daily_installs VALUES (?, ?, ?, ?) ON CONFLICT (day, store, app) "
                "DO UPDATE SET installs = excluded.installs",
                rows,
            )
        return len(revenue) + len(rows)

    def compare_week(self, day: str, week_before: str, country: str) -> dict[str, Any]:
        """The country's revenue on ``day`` and on ``week_before`` (None if missing)."""
        with self.connect() as conn:
            found = dict(
                conn.execute(
                    "SELECT day, revenue_micros FROM daily_revenue "
                    "WHERE country = ? AND day IN (?, ?)",
                    (country, day, week_before),
                ).fetchall()
            )
            if self.latency:
                time.sleep(self.latency)  # a slow query holds its connection
            conn.execute("INSERT INTO calls VALUES ('compare', ?)", (f"{day}/{country}",))
        return {"country": country, "now": found.get(day), "before": found.get(week_before)}

    # -- for setting up and checking ------------------------------------------------------------
    def seed_revenue(self, day: str, revenue: Mapping[str, int]) -> None:
        """Rows from before the pipeline ran (the previous week's)."""
        with self.connect() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO daily_revenue VALUES (?, ?, ?)",
                [(day, country, micros) for country, micros in revenue.items()],
            )

    def calls(self) -> dict[tuple[str, str], int]:
        """How many times each (operation, key) ran and committed."""
        with self.connect() as conn:
            found = conn.execute("SELECT op, key, COUNT(*) FROM calls GROUP BY op, key")
            return {(op, key): count for op, key, count in found.fetchall()}

    def revenue(self, day: str) -> dict[str, int]:
        with self.connect() as conn:
            rows = conn.execute(
                "SELECT country, revenue_micros FROM daily_revenue WHERE day = ?", (day,)
            )
            return dict(rows.fetchall())
