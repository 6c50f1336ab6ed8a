"""The two sides of the store contract, and the one layer that maps driver errors.

cairn's own stores are admin stores; ``admin(store)`` hands a store's admin side
to the tools that need it and refuses, with a cairn error, a store that has only
the engine's side. A driver error never leaves a store method raw: it is a
``StoreError`` chained from the driver's.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import pytest

from cairn import Cairn, ConfigurationError, StoreError
from cairn.clock import FakeClock
from cairn.observe.metrics import compute
from cairn.portable import prune
from cairn.store import AdminStore, Store, admin, open_store
from cairn.store.driver_errors import DuplicateRow
from cairn.store.sqlite import SQLiteStore


def test_cairns_stores_are_admin_stores(store_url: str) -> None:
    """Both backends satisfy the admin protocol, and admin() hands back the same
    object, so the admin side sees what the engine wrote."""
    store = open_store(store_url)
    try:
        assert isinstance(store, AdminStore)
        assert admin(store) is store
    finally:
        store.close()


def test_an_engine_only_store_is_refused_with_the_tool_named(tmp_path: Path) -> None:
    """A store of the user's own with only the engine's methods runs tasks, but the
    tools that need listings or reports refuse it with a ConfigurationError that
    names the tool, before reading anything."""
    inner = SQLiteStore(tmp_path / "cairn.db")
    engine_only = cast(Store, _EngineOnly(inner))
    try:
        with pytest.raises(ConfigurationError, match=r"^metrics needs a store with the admin"):
            compute(engine_only)
        with pytest.raises(ConfigurationError, match=r"^cairn prune needs .* _EngineOnly"):
            prune(engine_only, datetime.now().astimezone())
    finally:
        inner.close()


def test_the_engine_runs_on_an_engine_only_store(tmp_path: Path, clock: FakeClock) -> None:
    """Only the engine's side is needed to run a task, record its steps and read
    its result."""
    inner = SQLiteStore(tmp_path / "cairn.db")
    with Cairn(store=cast(Store, _EngineOnly(inner)), clock=clock) as app:

        @app.task()
        def double(ctx: Any, n: int) -> int:
            return int(ctx.step("twice", lambda: n * 2))

        assert app.run(double, n=21) == 42
    inner.close()


def test_a_duplicate_row_on_sqlite_is_a_store_error(db_path: Path) -> None:
    """A key that is already there is DuplicateRow (a StoreError) on SQLite, as it
    is on PostgreSQL, chained from the driver's IntegrityError."""
    store = SQLiteStore(db_path)
    try:
        insert = "INSERT INTO batches (name, task_name, created_at) VALUES ('b', 'j', 'x')"
        store._exec(insert)
        with pytest.raises(DuplicateRow) as refused:
            store._exec(insert)
        assert isinstance(refused.value.__cause__, sqlite3.IntegrityError)
        assert str(db_path) in str(refused.value)
    finally:
        store.close()


def test_an_error_raised_by_the_sqlite_driver_itself_is_a_store_error(db_path: Path) -> None:
    """An error the driver raises before SQLite sees the statement (a value it
    cannot bind) used to escape raw; it is a StoreError naming the file now."""
    store = SQLiteStore(db_path)
    try:
        with pytest.raises(StoreError, match="driver refused a statement") as refused:
            store._exec("SELECT ?", (object(),))
        assert isinstance(refused.value.__cause__, sqlite3.Error)
        assert not isinstance(refused.value, DuplicateRow)
    finally:
        store.close()


class _EngineOnly:
    """A store that forwards only the engine's methods to a real one: what a user's
    own ``Store`` implementation may offer."""

    def __init__(self, inner: Store) -> None:
        self._inner = inner
        self.url = inner.url
        self.identity = inner.identity

    def __getattr__(self, name: str) -> Any:
        if name not in _ENGINE_METHODS:
            raise AttributeError(name)
        return getattr(self._inner, name)


_ENGINE_METHODS = frozenset(
    name for name in dir(Store) if not name.startswith("_") and name not in ("url", "identity")
)
