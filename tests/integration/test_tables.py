"""The table descriptions (``cairn.store.tables``) are the schema: a migrated
store of either backend has exactly the tables and columns they list, table by
table, with the type, nullability, default and identity each column's
description implies. A migration that adds a column without describing it (so
that records, exports and prunes would silently leave it out) fails here.
"""

from __future__ import annotations

import sqlite3
from itertools import zip_longest
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import psycopg
import pytest

from cairn.store import open_store, sql, sqlmove, tables
from cairn.store.tables import Column


class Found(NamedTuple):
    """One column as a store's catalogue shows it, reduced to what a description says."""

    name: str
    type: str
    nullable: bool
    default: float | None
    assigned: bool


def _number(text: str | None) -> float | None:
    """A catalogue's DEFAULT text (``0``, ``'0'::integer``) as a number."""
    if text is None:
        return None
    return float(text.split("::")[0].strip("'()"))


def _sqlite_columns(path: str) -> dict[str, list[Found]]:
    conn = sqlite3.connect(path)
    try:
        names = conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        ).fetchall()
        found: dict[str, list[Found]] = {}
        for (table,) in names:
            rows = conn.execute(f"PRAGMA table_info({table})").fetchall()
            key_columns = sum(1 for row in rows if row[5])
            found[table] = [
                # An INTEGER PRIMARY KEY of its own is the rowid: SQLite assigns it.
                Found(
                    name,
                    kind,
                    not notnull and not pk,
                    _number(default),
                    kind == "INTEGER" and pk == key_columns == 1,
                )
                for _, name, kind, notnull, default, pk in rows
            ]
        return found
    finally:
        conn.close()


def _postgres_columns(url: str) -> dict[str, list[Found]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT table_name, column_name, data_type, is_nullable, column_default, "
            "is_identity FROM information_schema.columns WHERE table_schema = 'cairn' "
            "ORDER BY table_name, ordinal_position"
        ).fetchall()
    found: dict[str, list[Found]] = {}
    for table, name, data_type, nullable, default, identity in rows:
        column = Found(name, data_type, nullable == "YES", _number(default), identity == "YES")
        found.setdefault(table, []).append(column)
    return found


def _real_columns(url: str) -> dict[str, list[Found]]:
    open_store(url).close()  # migrates a new store to the latest schema
    if url.startswith("sqlite:"):
        return _sqlite_columns(urlsplit(url).path)
    return _postgres_columns(url)


def _type_of(column: Column, backend: str, real: str | None) -> str:
    """The type ``column`` is stored as on ``backend``: on PostgreSQL an integer
    is a bigint if the column is described as wide, else an integer."""
    sqlite_type, postgres_types = tables.STORED_AS[column.kind]
    if backend == "sqlite":
        return sqlite_type
    if column.kind == "integer":
        return "bigint" if column.wide else "integer"
    return real if real in postgres_types else " or ".join(sorted(postgres_types))


def _expected(table: tables.Table, backend: str, real: list[Found]) -> list[Found]:
    """What ``table``'s description says its columns are, all of them (internal
    ones are real columns too), in order."""
    real_types = {found.name: found.type for found in real}
    return [
        Found(
            c.name, _type_of(c, backend, real_types.get(c.name)), c.nullable, c.default, c.assigned
        )
        for c in table.columns
    ]


def test_a_migrated_store_has_exactly_the_described_tables_and_columns(store_url: str) -> None:
    """Every table the migrations build is described, every described table is
    built, and each table's columns are the described ones in the schema's
    order, each with the type its kind is stored as, its nullability, its
    default, and whether the store assigns it."""
    backend = store_url.split(":")[0]
    real = _real_columns(store_url)
    assert sorted(real) == sorted(tables.BY_NAME)
    mismatched = [
        f"{table.name}: built {built}, described {described}"
        for table in tables.TABLES
        for built, described in zip_longest(
            real[table.name], _expected(table, backend, real[table.name])
        )
        if built != described
    ]
    assert not mismatched, "\n".join(mismatched)


def test_a_column_the_description_lacks_is_caught(tmp_path: Any) -> None:
    """The check above is not vacuous: a column added to a store's table, as an
    undescribed migration would add it, makes that table differ from its
    description."""
    path = tmp_path / "cairn.db"
    url = f"sqlite:///{path}"
    open_store(url).close()
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE steps ADD COLUMN cost REAL")
    steps = _real_columns(url)["steps"]
    assert steps[:-1] == _expected(tables.STEPS, "sqlite", steps)
    assert steps[-1].name == "cost"
    assert steps != _expected(tables.STEPS, "sqlite", steps)


def test_every_table_belongs_to_a_batch_or_is_named_as_not() -> None:
    """Each described table is either among the tables an export carries and a
    prune deletes (``sqlmove.BATCH_PARTS``) or listed as holding no batch's rows,
    so a new table has to be placed in one or the other."""
    of_batch = [part.table.name for part in sqlmove.BATCH_PARTS]
    not_of_batch = [table.name for table in sqlmove.NOT_OF_A_BATCH]
    assert sorted(of_batch + not_of_batch) == sorted(tables.BY_NAME)


def test_every_column_that_may_hold_a_blob_reference_is_searched() -> None:
    """backup, export and gc look for blob references in exactly the columns the
    description marks, late operation outcomes among them."""
    searched = set()
    for query, _ in sqlmove.BLOB_REFERENCES:
        _, column, _, table, *_ = query.split()  # SELECT column FROM table WHERE ...
        searched.add(f"{table}.{column}")
    marked = {f"{t.name}.{c.name}" for t in tables.TABLES for c in t.columns if c.blob_refs}
    assert searched == marked
    assert "operations.late_result" in marked


def test_a_record_whose_fields_differ_from_its_table_is_refused() -> None:
    """A record type is built from a row only if its fields are its table's
    columns in order; a record with a field out of place is refused when the
    converter is made, not read wrongly later."""

    class Swapped(NamedTuple):
        value: str
        key: str

    with pytest.raises(TypeError, match="Swapped has fields"):
        sql.record_reader("swapped", tables.CAIRN_META, Swapped)

    class Meta(NamedTuple):
        key: str
        value: str

    read = sql.record_reader("meta_record", tables.CAIRN_META, Meta)
    assert read(("schema_version", "2")) == Meta("schema_version", "2")
