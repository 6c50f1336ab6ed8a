"""A task's page finds the tasks related to it through an index, on both stores,
in a store made at schema 3 and upgraded.

The dashboard's task page lists the task's spawned children (``child_ids``) and
what each ``cairn fidelity`` run on it cost (``probe_costs``, which finds the
runs' probe tasks: named ``cairn.fidelity``, their ids starting
``fidelity:TASK:CONVERSATION:``). Up to schema 3 no index led with either
column, so every view of a task page read every task. Schema 4 adds
``tasks_by_parent`` and ``tasks_by_name``. (An id range would not do for the
probes: under a collation other than C, such as the ICU ``en-US`` the
PostgreSQL database here is made with, the ids that start ``fidelity:TASK:``
are not one range of the id index.)

The store is made as a cairn of schema 3 made it (its migrations only), holding
``TASKS`` tasks, a parent with two children, and a task with a conversation and
fidelity runs on it (and on another task); then this cairn opens it, which
upgrades it. The statements each lookup runs are captured as they run, and
explained: on SQLite the plan must search the new index and scan no table; on
PostgreSQL, run under ``EXPLAIN (ANALYZE, FORMAT JSON)``, no node may be a
sequential scan or filter out more than a few rows, and the new index is used.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn.admin import FIDELITY_TASK, fidelity_task_id, probe_costs
from cairn.store import open_store
from cairn.store.migrate import latest_version, migrations
from cairn.store.sqlbase import SQLStore
from cairn.store.sqlite import SQLiteStore, _statements
from tests.conftest import postgres_admin_url, with_database
from tests.integration.test_claim_plans import (
    _assert_pg_reads_few_rows,
    _pg_plan,
    _sqlite_plan,
)

TASKS = 20_000
SCHEMA_BEFORE = 3
CREATED = "2026-05-24T04:30:00.000000+00:00"
PARENT = "parent"
AGENT = "agent"
PROBES = [fidelity_task_id(AGENT, "main", f"2026052{n}T000000.000000Z") for n in range(3)]
# A run on another task: the name index reads it, the id filter leaves it out.
OTHER_PROBES = [fidelity_task_id(f"{AGENT}x", "main", "20260525T000000.000000Z")]


def _old_rows(execute_many: Callable[[str, list[tuple[Any, ...]]], Any], mark: str) -> None:
    """The rows a schema-3 cairn left: many tasks, a parent and its children, an
    agent task with a conversation, and fidelity runs' probe tasks."""
    p = mark
    insert = (
        "INSERT INTO tasks (id, name, args, codec, status, created_at, updated_at, parent_id) "
        f"VALUES ({p}, {p}, '{{}}', 'json', 'completed', {p}, {p}, {p})"
    )
    rows: list[tuple[Any, ...]] = [
        (f"t/{i}", "review", CREATED, CREATED, None) for i in range(TASKS)
    ]
    rows += [(PARENT, "fan", CREATED, CREATED, None), (AGENT, "agent", CREATED, CREATED, None)]
    rows += [(f"{PARENT}/{k}", "review", CREATED, CREATED, PARENT) for k in ("a", "b")]
    rows += [(i, FIDELITY_TASK, CREATED, CREATED, None) for i in PROBES + OTHER_PROBES]
    execute_many(insert, rows)
    execute_many(f"INSERT INTO conversations (task_id, name) VALUES ({p}, {p})", [(AGENT, "main")])


def _sqlite_at_schema_3(path: Path) -> str:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        for migration in migrations("sqlite")[:SCHEMA_BEFORE]:
            for statement in _statements(migration.sql):
                conn.execute(statement)
        conn.execute("INSERT INTO cairn_meta VALUES ('schema_version', ?)", (str(SCHEMA_BEFORE),))
        _old_rows(conn.executemany, "?")
        (conv_id,) = conn.execute("SELECT conv_id FROM conversations").fetchone()
        conn.execute(
            "INSERT INTO messages (conv_id, idx, role, content, tokens, kind, created_at) "
            "VALUES (?, 0, 'user', ?, 3, 'message', 0)",
            (conv_id, b'j{"role":"user","content":"hi"}'),
        )
        conn.execute("COMMIT")
    finally:
        conn.close()
    return f"sqlite:///{path}"


def _postgres_at_schema_3(request: pytest.FixtureRequest) -> tuple[str, Callable[[], None]]:
    """A database of its own (ICU en-US collation) holding a schema-3 store."""
    import psycopg

    request.getfixturevalue("pg_template")  # skipped, as the others, without a server
    admin = postgres_admin_url()
    name = f"cairn_page_plans_{os.getpid()}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}".encode())
        conn.execute(
            f"CREATE DATABASE {name} TEMPLATE template0 LOCALE_PROVIDER icu "
            "ICU_LOCALE 'en-US'".encode()
        )
    url = with_database(admin, name)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(b"CREATE SCHEMA cairn")
        conn.execute(b"SET search_path = cairn")
        with conn.transaction():
            for migration in migrations("postgres")[:SCHEMA_BEFORE]:
                conn.execute(migration.sql.encode())  # a script: no parameters to bind
            conn.execute(
                "INSERT INTO cairn_meta VALUES ('schema_version', %s)", (str(SCHEMA_BEFORE),)
            )
            _old_rows(lambda sql, rows: conn.cursor().executemany(sql, rows), "%s")
            conn.execute(
                "INSERT INTO messages (conv_id, idx, role, content, tokens, kind, created_at) "
                "SELECT conv_id, 0, 'user', %s, 3, 'message', 0 FROM conversations",
                (b'j{"role":"user","content":"hi"}',),
            )

    def drop() -> None:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)".encode())

    return url, drop


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SQLStore]:
    """A store of each backend made at schema 3, opened (so upgraded) by this cairn."""
    if request.param == "sqlite":
        url, dropped = _sqlite_at_schema_3(tmp_path_factory.mktemp("page") / "old.db"), None
    else:
        url, dropped = _postgres_at_schema_3(request)
    try:
        opened = open_store(url)
        try:
            assert isinstance(opened, SQLStore)
            assert opened.found_schema == SCHEMA_BEFORE
            assert opened.schema_version == latest_version(request.param)
            opened._exec("ANALYZE" if isinstance(opened, SQLiteStore) else "ANALYZE tasks")
            yield opened
        finally:
            opened.close()
    finally:
        if dropped is not None:
            dropped()


def _task_reads(store: SQLStore, action: Callable[[], object]) -> list[tuple[str, list[Any]]]:
    """The statements ``action`` runs through the store that read tasks alone
    (not joined to the history, which is read by task id)."""
    seen: list[tuple[str, list[Any]]] = []
    run = store._exec

    def recording(statement: str, params: Any = (), **options: Any) -> Any:
        seen.append((statement, list(params)))
        return run(statement, params, **options)

    store._exec = recording  # type: ignore[method-assign]
    try:
        action()
    finally:
        del store._exec
    return [(sql, params) for sql, params in seen if " FROM tasks WHERE " in sql]


def _assert_searches(store: SQLStore, statement: str, params: list[Any], index: str) -> None:
    """``statement``'s plan finds its rows through ``index`` and reads no other."""
    if isinstance(store, SQLiteStore):
        plan = _sqlite_plan(store, statement, params)
        assert any(f"USING INDEX {index}" in step for step in plan), plan
        assert not any(step.startswith("SCAN") for step in plan), plan
        return
    indexes = _assert_pg_reads_few_rows(_pg_plan(store, statement, params), statement)
    assert index in indexes, indexes


def test_a_tasks_fidelity_runs_are_found_by_the_name_index(store: SQLStore) -> None:
    """The dashboard's lookup of the fidelity runs on a task is one statement on
    tasks, which searches tasks_by_name (no scan, at most a few rows filtered
    out on PostgreSQL) and returns the runs made before the upgrade."""
    reads = _task_reads(store, lambda: probe_costs(store, AGENT))
    assert len(reads) == 1, reads
    statement, params = reads[0]
    _assert_searches(store, statement, params, "tasks_by_name")
    found = [row[1] for row in store._exec(statement, params).rows]  # pos, id, ...
    assert sorted(found) == sorted(PROBES)


def test_a_tasks_children_are_found_by_the_parent_index(store: SQLStore) -> None:
    """The task page's list of spawned children searches tasks_by_parent, and
    lists the children recorded before the upgrade, in the order they were made."""
    reads = _task_reads(store, lambda: store.child_ids(PARENT))
    assert len(reads) == 1, reads
    _assert_searches(store, *reads[0], "tasks_by_parent")
    assert store.child_ids(PARENT) == [f"{PARENT}/a", f"{PARENT}/b"]
