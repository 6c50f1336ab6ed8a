"""Fixtures shared by every test: a fresh store per test and a fake clock.

``store_url`` runs a test once per backend: a new SQLite file, and a new
PostgreSQL database cloned from a migrated template (``CREATE DATABASE …
TEMPLATE``, as procrastinate does). The server comes from
``CAIRN_TEST_POSTGRES_URL`` (default: the local server). Without a server the
PostgreSQL cases are skipped, except in CI (``CI=true``), where they fail.

The store conformance suite (``tests/integration/store/``) runs every test of
its own once per backend through one fixture, ``store_backend``, on these same
databases; ``store_url`` here serves the rest (the acceptance tests among them).
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from cairn import Cairn
from cairn.clock import FakeClock
from cairn.observe.logs import QUIET
from tests.pgcluster import _kept_cluster, pg_cluster  # noqa: F401 - the fixtures, for every test module

DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/postgres"
BACKENDS = ("sqlite", "postgres")
_databases = itertools.count()


def postgres_admin_url() -> str:
    """The server tests may create databases on (its maintenance database)."""
    return os.environ.get("CAIRN_TEST_POSTGRES_URL") or DEFAULT_PG


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"PostgreSQL is required in CI: {reason}")
    pytest.skip(f"PostgreSQL not available: {reason}")


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """A database migrated once per session, cloned for every PostgreSQL test."""
    try:
        import psycopg
    except ImportError:
        _unavailable("psycopg is not installed (pip install -e '.[test]')")
    admin = postgres_admin_url()
    template = f"cairn_tpl_{os.getpid()}"
    try:
        with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {template}")
            conn.execute(f"CREATE DATABASE {template}")
    except psycopg.OperationalError as exc:
        _unavailable(str(exc).strip())
    from cairn.store.postgres import PostgresStore

    PostgresStore(with_database(admin, template)).close()
    yield template
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {template} WITH (FORCE)")


@pytest.fixture
def pg_url(pg_template: str) -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for one test."""
    import psycopg

    admin = postgres_admin_url()
    name = f"cairn_t_{os.getpid()}_{next(_databases)}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {pg_template}")
    yield with_database(admin, name)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new, empty store for one test, once per backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'cairn.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A path for a new SQLite store, private to the test."""
    return tmp_path / "cairn.db"


@pytest.fixture
def clock() -> FakeClock:
    """A clock whose sleeps return at once and only move its own time forward."""
    return FakeClock()


@pytest.fixture
def app(db_path: Path, clock: FakeClock) -> Iterator[Cairn]:
    """A Cairn app on a fresh SQLite file, with the fake clock."""
    instance = Cairn(f"sqlite:///{db_path}", clock=clock)
    yield instance
    instance.close()


@pytest.fixture
def any_app(store_url: str, clock: FakeClock) -> Iterator[Cairn]:
    """A Cairn app on a fresh store of each backend, with the fake clock."""
    instance = Cairn(store_url, clock=clock)
    yield instance
    instance.close()


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """Put the root logger back after each test: ``cairn worker --log-format``
    run in-process replaces its handlers with one on that command's stderr, and
    without this a later test's log lines would land in another command's
    output (a JSON answer read back would no longer parse)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    quiet = {name: logging.getLogger(name).level for name in QUIET}
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    for handler in handlers:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)
    for name, was in quiet.items():
        logging.getLogger(name).setLevel(was)
