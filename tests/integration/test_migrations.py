"""Upgrading a store made by an earlier cairn: each migration after the first
is tested from the schema before it, with rows in it, on both backends.

The store is built the way the earlier cairn built it: its migrations only, up
to that version, then a task enqueued and run part way. The current cairn opens
it, upgrades it in place, and carries on: the old rows are all there and the
task resumes from its recorded step.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest

from cairn import Cairn, Context
from cairn.store.migrate import latest_version, migrations
from cairn.store.sqlite import _statements

# The schema version the stores under test start from.
BEFORE = 1
CREATED = "2026-05-24T04:30:00.000000+00:00"


def _sqlite_at(path: Path, version: int) -> None:
    """A SQLite store as a cairn whose newest migration was ``version`` left it,
    holding one batch with one task that ran its first step and was then killed."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("BEGIN IMMEDIATE")
        for migration in migrations("sqlite")[:version]:
            for statement in _statements(migration.sql):
                conn.execute(statement)
        conn.execute(
            "INSERT INTO cairn_meta (key, value) VALUES ('schema_version', ?)", (str(version),)
        )
        _old_rows(conn.execute, "?")
        conn.execute("COMMIT")
    finally:
        conn.close()


def _old_rows(execute: object, mark: str) -> None:
    """The rows the earlier cairn left: a running task whose owner died after step 1."""
    assert callable(execute)
    p = mark
    execute(
        f"INSERT INTO batches (name, task_name, created_at) VALUES ({p}, {p}, {p})",
        ("old", "resume", CREATED),
    )
    execute(
        "INSERT INTO tasks (id, batch, item_key, name, args, codec, status, attempts, fence, "
        "owner, lease_expires_at, created_at, started_at, updated_at) "
        f"VALUES ({p}, {p}, {p}, {p}, {p}, {p}, 'running', 1, 1, {p}, {p}, {p}, {p}, {p})",
        (
            "old/n=1",
            "old",
            "n=1",
            "resume",
            '{"n":1}',
            "json",
            "elsewhere-0000/1/1/dead",
            CREATED,
            CREATED,
            CREATED,
            CREATED,
        ),
    )
    execute(
        "INSERT INTO steps (task_id, seq, kind, name, status, output, attempts, task_attempt, "
        f"run_attempts, started_at, finished_at) VALUES ({p}, 1, 'step', 'first', "
        f"'completed', '10', 1, 1, 1, {p}, {p})",
        ("old/n=1", CREATED, CREATED),
    )


def _resume_app(url: str, calls: list[str]) -> tuple[Cairn, object]:
    app = Cairn(url, lease=0.5)

    def counted(name: str, value: int) -> int:
        calls.append(name)
        return value

    @app.task(name="resume")
    def resume(ctx: Context, n: int) -> int:
        first: int = ctx.step("first", counted, "first", 10)
        second: int = ctx.step("second", counted, "second", 20)
        return first + second + n

    return app, resume


def _check_upgraded_and_resumed(url: str) -> None:
    calls: list[str] = []
    app, resume = _resume_app(url, calls)
    with app:
        report = app.run_batch("old", resume, [], progress=False)  # type: ignore[arg-type]
        assert report.completed == 1, report
        assert app.store.get_task("old/n=1").result == "31"  # type: ignore[union-attr]
    # The step recorded before the upgrade was replayed, not run again.
    assert calls == ["second"]


def test_a_sqlite_store_of_schema_1_is_upgraded_and_its_task_resumes(tmp_path: Path) -> None:
    """A SQLite file made by the schema-1 cairn, with a task killed after its
    first step, opens under this cairn: the file is upgraded to the latest
    schema (the new claim indexes and operation columns exist), and the task's
    remaining step runs while its recorded one is replayed."""
    path = tmp_path / "old.db"
    _sqlite_at(path, BEFORE)
    _check_upgraded_and_resumed(f"sqlite:///{path}")
    conn = sqlite3.connect(path)
    try:
        version = conn.execute("SELECT value FROM cairn_meta WHERE key = 'schema_version'")
        assert int(version.fetchone()[0]) == latest_version("sqlite")
        indexes = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        assert {"tasks_pending", "tasks_running_by_lease", "tasks_by_owner"} <= indexes
        columns = {row[1] for row in conn.execute("PRAGMA table_info(operations)")}
        assert {"late_result", "late_at"} <= columns
    finally:
        conn.close()


def test_a_postgres_schema_of_version_1_is_upgraded_and_its_task_resumes(pg_url: str) -> None:
    """A PostgreSQL schema made by the schema-1 cairn (in a schema of its own,
    beside the test database's current one), with a task killed after its first
    step, is upgraded in place when this cairn opens it, and the task resumes."""
    schema = "made_by_schema_1"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"SET search_path = {schema}")
        with conn.transaction():
            for migration in migrations("postgres")[:BEFORE]:
                conn.execute(migration.sql.encode())
            conn.execute(
                "INSERT INTO cairn_meta (key, value) VALUES ('schema_version', %s)", (str(BEFORE),)
            )
            _old_rows(conn.execute, "%s")
    _check_upgraded_and_resumed(f"{pg_url}?schema={schema}")
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(f"SELECT value FROM {schema}.cairn_meta").fetchone()
        assert row is not None
        assert int(row[0]) == latest_version("postgres")
        found = conn.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s", (schema,)
        ).fetchall()
        assert {"tasks_pending", "tasks_running_by_lease"} <= {r[0] for r in found}


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_migrations_are_numbered_without_gaps_from_1(backend: str) -> None:
    """Each backend's migration files are numbered 1..n, and both backends are at
    the same version: a schema change lands on both at once."""
    versions = [m.version for m in migrations(backend)]
    assert versions == list(range(1, len(versions) + 1))
    assert latest_version(backend) == latest_version("sqlite") == latest_version("postgres")
