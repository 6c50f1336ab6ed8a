"""The store conformance suite: every test in this folder runs once per backend.

One fixture, ``store_backend``, is parametrised over :data:`BACKENDS`; the
fixtures the tests take (``store_url``, ``any_app``) are views of it. A test that
needs something not every backend can do says so with a marker naming a field
of :class:`cairn.store.Capabilities`::

    @pytest.mark.requires("multi_process")
    def test_two_processes_share_a_batch(store_url: str) -> None: ...

and is skipped, naming the capability, on a backend that declares it ``False``.
A test may also read ``store_backend.capabilities`` to choose what to check.
No test here asks which backend it runs on to decide whether to run.

Each test gets a new store: a SQLite file under ``tmp_path``, or a PostgreSQL
database cloned from the session's migrated template (``pg_url`` in
``tests/conftest.py``). Without a PostgreSQL server (``CAIRN_TEST_POSTGRES_URL``)
the PostgreSQL cases are skipped, except in CI (``CI=true``), where they fail.

To add a backend: declare its ``capabilities`` on the store class, add its name
to :data:`BACKENDS`, and teach :func:`_new_store_url` to make a fresh, empty
store of it for one test. Every test here then runs on it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path

import pytest

from cairn import Cairn
from cairn.clock import FakeClock
from cairn.store import Capabilities, SQLiteStore, Store, open_store

BACKENDS = ("sqlite", "postgres")
CAPABILITIES = frozenset(field.name for field in fields(Capabilities))


@dataclass(frozen=True)
class Backend:
    """One backend under test: its name, a new store's URL, and what it can do."""

    name: str
    url: str
    capabilities: Capabilities

    def open(self) -> Store:
        """Open the test's store (the caller closes it)."""
        return open_store(self.url)


def _capabilities(name: str) -> Capabilities:
    if name == "sqlite":
        return SQLiteStore.capabilities
    from cairn.store.postgres import PostgresStore

    return PostgresStore.capabilities


def _new_store_url(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new, empty store of backend ``name``, private to the test."""
    if name == "sqlite":
        return f"sqlite:///{tmp_path / 'cairn.db'}"
    return str(request.getfixturevalue("pg_url"))


def _skip_unless_capable(
    request: pytest.FixtureRequest, name: str, capabilities: Capabilities
) -> None:
    """Skip (before any store is made) unless the backend has every capability the
    test's ``requires`` markers name; fail on a name Capabilities does not have."""
    for marker in request.node.iter_markers("requires"):
        for capability in marker.args:
            if capability not in CAPABILITIES:
                pytest.fail(f"requires({capability!r}): Capabilities has no such field")
            if not getattr(capabilities, capability):
                pytest.skip(f"the {name} store lacks the capability {capability!r}")


@pytest.fixture(params=BACKENDS)
def store_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """The backend this run of the test is for, with a new, empty store."""
    name = str(request.param)
    _skip_unless_capable(request, name, _capabilities(name))
    return Backend(name, _new_store_url(name, request, tmp_path), _capabilities(name))


@pytest.fixture
def store_url(store_backend: Backend) -> str:
    """The URL of the test's new store."""
    return store_backend.url


@pytest.fixture
def any_app(store_backend: Backend, clock: FakeClock) -> Iterator[Cairn]:
    """A Cairn app on the test's new store, with the fake clock."""
    instance = Cairn(store_backend.url, clock=clock)
    yield instance
    instance.close()
