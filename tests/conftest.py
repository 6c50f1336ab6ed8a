"""Fixtures shared by every test: a fresh SQLite file per test and a fake clock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn import Cairn
from cairn.clock import FakeClock


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
