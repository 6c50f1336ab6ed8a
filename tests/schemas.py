"""A store's schema described as plain data, and compared with the canonical one.

The canonical schemas (``tests/integration/canonical_schema_postgres.json``,
``canonical_schema_sqlite.json``) are the reviewable contract of what the
migrations build: a fresh store and a store upgraded from an earlier schema must
both match them. After an intended schema change, regenerate them with
``CAIRN_WRITE_CANONICAL_SCHEMA=1 pytest tests/integration/test_postgres_store.py``
and review the diff.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

HERE = Path(__file__).parent / "integration"
CANONICAL_POSTGRES = HERE / "canonical_schema_postgres.json"
CANONICAL_SQLITE = HERE / "canonical_schema_sqlite.json"


def _rows(url: str, statement: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(statement.encode(), params).fetchall()


_TRIGRAM_CLASS = re.compile(r" \w+\.gin_trgm_ops\b")


def describe_postgres(url: str, schema: str) -> dict[str, Any]:
    """Each table of ``schema``: its columns (name, type, nullability) in order, and
    its indexes as PostgreSQL prints them, without the schema name."""
    described: dict[str, Any] = {}
    columns = _rows(
        url,
        "SELECT table_name, column_name, data_type, is_nullable "
        "FROM information_schema.columns WHERE table_schema = %s "
        "ORDER BY table_name, ordinal_position",
        (schema,),
    )
    for table, column, data_type, nullable in columns:
        entry = described.setdefault(table, {"columns": [], "indexes": []})
        entry["columns"].append(
            f"{column} {data_type}" + ("" if nullable == "YES" else " NOT NULL")
        )
    indexes = _rows(
        url,
        "SELECT tablename, indexdef FROM pg_indexes WHERE schemaname = %s "
        "ORDER BY tablename, indexname",
        (schema,),
    )
    for table, definition in indexes:
        # pg_trgm lives in one schema per database (the first cairn schema
        # migrated there, or a DBA's): its operator class is named by that
        # schema, whichever store's index uses it.
        definition = _TRIGRAM_CLASS.sub(" gin_trgm_ops", definition)
        described[table]["indexes"].append(definition.replace(f" {schema}.", " "))
    return described


def describe_sqlite(path: Path) -> dict[str, Any]:
    """Each table of the file: its columns from PRAGMA table_info in order, and its
    indexes from PRAGMA index_list / index_info."""
    conn = sqlite3.connect(path)
    try:
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        return {table: _sqlite_table(conn, table) for table in tables}
    finally:
        conn.close()


def _sqlite_table(conn: sqlite3.Connection, table: str) -> dict[str, list[str]]:
    columns = [
        f"{name} {kind}" + (" NOT NULL" if notnull else "") + (f" PRIMARY KEY {pk}" if pk else "")
        for _, name, kind, notnull, _, pk in conn.execute(f"PRAGMA table_info({table})")
    ]
    indexes = []
    for _, name, unique, origin, partial in sorted(
        conn.execute(f"PRAGMA index_list({table})"), key=lambda row: row[1]
    ):
        keys = ", ".join(row[2] for row in conn.execute(f"PRAGMA index_info({name})"))
        flags = ("UNIQUE " if unique else "") + ("PARTIAL " if partial else "")
        indexes.append(f"{flags}{name} ({keys}) origin={origin}")
    return {"columns": columns, "indexes": indexes}


def check_canonical(actual: dict[str, Any], canonical: Path, *, built_by: str = "") -> None:
    """Fail with a unified diff unless ``actual`` is what ``canonical`` describes
    (or write ``canonical`` when CAIRN_WRITE_CANONICAL_SCHEMA=1). ``built_by``
    names a store that is not fresh (an upgraded one): it is only ever compared,
    since the canonical schema is what the migrations build on an empty store."""
    text = json.dumps(actual, indent=2, sort_keys=True) + "\n"
    if not built_by and os.environ.get("CAIRN_WRITE_CANONICAL_SCHEMA") == "1":
        canonical.write_text(text, encoding="utf-8")
    expected = canonical.read_text(encoding="utf-8")
    if text == expected:
        return
    diff = "".join(
        difflib.unified_diff(
            expected.splitlines(keepends=True),
            text.splitlines(keepends=True),
            fromfile=f"{canonical.name} (checked in)",
            tofile=built_by or "built by the migrations",
        )
    )
    if built_by:
        advice = (
            "An upgraded store must end with the schema a new one gets: the numbered "
            "migration that changed a new store's schema must change an old one's alike."
        )
    else:
        advice = (
            "If the change is intended, regenerate it with CAIRN_WRITE_CANONICAL_SCHEMA=1 "
            "and review the diff."
        )
    pytest.fail(
        f"the schema built by {built_by or 'the migrations'} differs from "
        f"{canonical.name}:\n{diff}\n{advice}",
        pytrace=False,
    )
