"""Upgrading a store made by an earlier cairn: each migration after the first
is tested from the schema before it, with rows in it, on both backends.

The store is built the way the earlier cairn built it: its migrations only, up
to that version, then a task enqueued and run part way
(``tests/fixtures/schema_1/make.py``). The current cairn opens it, upgrades it in
place, and carries on: the old rows are all there and the task resumes from its
recorded step. The same store is also kept as a dump (``tests/fixtures/schema_1``),
loaded as it is and upgraded to exactly the canonical schema, so the upgrade is
tested from a store this build's code did not make.
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from cairn import Cairn, Context
from cairn.admin.reruns import ForkPoint, apply_rerun, plan_rerun
from cairn.store import admin, open_store
from cairn.store.migrate import latest_version, migrations
from cairn.store.records import InFlightNote
from cairn.versions import check_app
from tests.conftest import postgres_admin_url, with_database
from tests.fixtures.schema_1.make import (
    OPERATION,
    POSTGRES_DUMP,
    SQLITE_DUMP,
    TASK,
    build_postgres,
    build_sqlite,
)
from tests.schemas import (
    CANONICAL_POSTGRES,
    CANONICAL_SQLITE,
    check_canonical,
    describe_postgres,
    describe_sqlite,
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
        # Schema 3: the step recorded before fingerprints has none; `cairn
        # check` takes it as compatible, and says it could not compare it.
        (checked,) = check_app(app)
        assert checked.ok
        assert checked.replay.unprinted == 1
        report = app.run_batch("old", resume, [], progress=False)  # type: ignore[arg-type]
        assert report.completed == 1, report
        assert app.store.get_task(TASK).result == "31"  # type: ignore[union-attr]
        history = app.store.load_history(TASK)
    # The step recorded before the upgrade was replayed, not run again.
    assert calls == ["second"]
    steps = {record.name: record for record in history.values()}
    assert steps["first"].fingerprint is None
    assert (steps["second"].fingerprint or "").startswith("code:")
    _check_rerun_after_upgrade(url)
    _check_in_flight_after_upgrade(url)


def _check_in_flight_after_upgrade(url: str) -> None:
    """Schema 9: the task made before it has no step in flight noted, and a
    note for it, finished, shows nothing: only a running task has one."""
    with Cairn(url) as app:
        tools = admin(app.store)
        assert tools.steps_in_flight([TASK]) == {}
        task = tools.get_task(TASK)
        assert task is not None
        assert task.status == "completed"
        now = app.clock.now()
        app.store.note_in_flight([InFlightNote(TASK, task.fence, 1, "first", now)])
        assert tools.steps_in_flight([TASK]) == {}


def _check_rerun_after_upgrade(url: str) -> None:
    """Schema 5: the task made before it is at run 1, and a rerun from its
    second step (whose first was recorded before fingerprints) runs only that
    step again, keeping the first run readable."""
    calls: list[str] = []
    app, resume = _resume_app(url, calls)
    with app:
        tools = admin(app.store)
        task = tools.get_task(TASK)
        assert task is not None
        assert task.run == 1
        plan = plan_rerun(tools, [task], ForkPoint(step="second"))
        assert [t.step for t in plan.runnable] == ["second"]
        apply_rerun(tools, plan, app.clock.now(), target=f"task {TASK}")
        report = app.run_batch("old", resume, [], progress=False)  # type: ignore[arg-type]
        assert report.completed == 1, report
        after = tools.get_task(TASK)
        assert after is not None
        assert after.run == 2
        assert [r.fork_seq for r in tools.task_runs(TASK)] == [2]
    assert calls == ["second"]


def test_a_sqlite_store_of_schema_1_is_upgraded_and_its_task_resumes(tmp_path: Path) -> None:
    """A SQLite file made by the schema-1 cairn, with a task killed after its
    first step, opens under this cairn: the file is upgraded to the latest
    schema (the new claim indexes, operation columns and the task page's
    indexes exist), and the task's remaining step runs while its recorded one
    is replayed."""
    path = tmp_path / "old.db"
    build_sqlite(path)
    _check_upgraded_and_resumed(f"sqlite:///{path}")
    conn = sqlite3.connect(path)
    try:
        version = conn.execute("SELECT value FROM cairn_meta WHERE key = 'schema_version'")
        assert int(version.fetchone()[0]) == latest_version("sqlite")
        indexes = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        assert {"tasks_pending", "tasks_running_by_lease", "tasks_by_owner"} <= indexes
        assert {"tasks_by_name", "tasks_by_parent"} <= indexes  # schema 4
        columns = {row[1] for row in conn.execute("PRAGMA table_info(operations)")}
        assert {"late_result", "late_at"} <= columns
        columns = {row[1] for row in conn.execute("PRAGMA table_info(steps)")}
        assert {"fingerprint", "kept"} <= columns
        assert "workers" in {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()


def test_a_postgres_schema_of_version_1_is_upgraded_and_its_task_resumes(pg_url: str) -> None:
    """A PostgreSQL schema made by the schema-1 cairn (in a schema of its own,
    beside the test database's current one), with a task killed after its first
    step, is upgraded in place when this cairn opens it, and the task resumes."""
    schema = "made_by_schema_1"
    build_postgres(pg_url, schema)
    _check_upgraded_and_resumed(f"{pg_url}?schema={schema}")
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(f"SELECT value FROM {schema}.cairn_meta").fetchone()
        assert row is not None
        assert int(row[0]) == latest_version("postgres")
        found = conn.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s", (schema,)
        ).fetchall()
        assert {"tasks_pending", "tasks_running_by_lease"} <= {r[0] for r in found}
        assert {"tasks_by_name", "tasks_by_parent"} <= {r[0] for r in found}  # schema 4


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_migrations_are_numbered_without_gaps_from_1(backend: str) -> None:
    """Each backend's migration files are numbered 1..n, and both backends are at
    the same version: a schema change lands on both at once."""
    versions = [m.version for m in migrations(backend)]
    assert versions == list(range(1, len(versions) + 1))
    assert latest_version(backend) == latest_version("sqlite") == latest_version("postgres")


# -- the stores kept from schema 1 --------------------------------------------------------


def _check_kept_rows(url: str) -> None:
    """The kept store's rows after the upgrade: the operation's audit row is whole,
    with no late outcome (a column 0002 added), and its task resumes."""
    with Cairn(url) as app:
        operation = app.store.get_operation(*OPERATION)
        assert operation is not None
        assert (operation.status, operation.result) == (
            "completed",
            '{"status": 200, "reply": "ok"}',
        )
        assert (operation.late_result, operation.late_at) == (None, None)
    _check_upgraded_and_resumed(url)


def test_the_kept_sqlite_store_of_schema_1_upgrades_to_the_canonical_schema(
    tmp_path: Path,
) -> None:
    """The SQLite dump kept from schema 1, loaded into a new file, is upgraded by
    this cairn to exactly canonical_schema_sqlite.json, its version is the latest,
    and its rows are all there: the operation is read back, the task resumes."""
    path = tmp_path / "kept.db"
    conn = sqlite3.connect(path)
    try:
        conn.executescript(SQLITE_DUMP.read_text(encoding="utf-8"))
    finally:
        conn.close()
    _check_kept_rows(f"sqlite:///{path}")
    check_canonical(describe_sqlite(path), CANONICAL_SQLITE, built_by="the upgrade from schema 1")
    conn = sqlite3.connect(path)
    try:
        version = conn.execute("SELECT value FROM cairn_meta WHERE key = 'schema_version'")
        assert int(version.fetchone()[0]) == latest_version("sqlite")
    finally:
        conn.close()


@pytest.fixture
def kept_pg(pg_template: str) -> Iterator[str]:
    """A new database on the shared server holding the PostgreSQL dump kept from
    schema 1, dropped afterwards. (``pg_template`` is asked for so the test is
    skipped, like the others, without a server.)"""
    admin = postgres_admin_url()
    name = f"cairn_upgrade_{secrets.token_hex(6)}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE template0".encode())
    url = with_database(admin, name)
    try:
        with psycopg.connect(url) as conn:
            conn.execute(POSTGRES_DUMP.read_text(encoding="utf-8").encode())
        yield url
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)".encode())


def test_the_kept_postgres_store_of_schema_1_upgrades_to_the_canonical_schema(
    kept_pg: str,
) -> None:
    """The PostgreSQL dump kept from schema 1, loaded into a database of its own,
    is upgraded by this cairn to exactly canonical_schema_postgres.json, its
    version is the latest, and its rows are all there: the operation is read back,
    the task resumes."""
    _check_kept_rows(kept_pg)
    check_canonical(
        describe_postgres(kept_pg, "cairn"),
        CANONICAL_POSTGRES,
        built_by="the upgrade from schema 1",
    )
    with psycopg.connect(kept_pg) as conn:
        row = conn.execute("SELECT value FROM cairn.cairn_meta").fetchone()
    assert row is not None
    assert int(row[0]) == latest_version("postgres")


def test_a_sqlite_store_of_schema_5_keeps_its_rate_permits_through_schema_7(
    tmp_path: Path,
) -> None:
    """A store made by migrations 1 to 5, holding a Rate permit that still counts
    (ended a second ago, in a 60-second window), upgraded to the latest schema (token
    amounts, closed limits, budgets): the permit holds amount 0 and still fills
    its Rate(1), the limit is not closed, and the new tables are there, empty."""
    path = tmp_path / "five.db"
    conn = sqlite3.connect(path)
    try:
        for migration in migrations("sqlite")[:5]:
            conn.executescript(migration.sql)
        conn.execute("INSERT INTO cairn_meta (key, value) VALUES ('schema_version', '5')")
        now = datetime.now(UTC)
        ended = (now - timedelta(seconds=1)).isoformat()
        conn.execute("INSERT INTO limits (name) VALUES ('api')")
        conn.execute(
            "INSERT INTO permits (limit_name, permit, owner, task_id, held, granted_at, ends_at)"
            " VALUES ('api', 'old', 'o', 't', 0, ?, ?)",
            (ended, ended),
        )
        conn.commit()
    finally:
        conn.close()
    store = open_store(f"sqlite:///{path}")
    try:
        window, lease = timedelta(seconds=60), now + timedelta(seconds=10)
        refused = store.acquire_permit("api", 1, window, "new", "o", "t", now, lease)
        assert refused is not None
        assert refused.held == 0
        assert store.get_budget("batch:any") is None
    finally:
        store.close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT amount FROM permits").fetchall() == [(0,)]
        assert conn.execute("SELECT closed_until FROM limits").fetchall() == [(None,)]
        version = conn.execute("SELECT value FROM cairn_meta WHERE key = 'schema_version'")
        assert int(version.fetchone()[0]) == latest_version("sqlite")
    finally:
        conn.close()
