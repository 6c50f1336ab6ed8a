"""Async tasks: the same engine as sync ones, driven by an event loop.

The tests that use a store, on every backend, are in ``store/test_async.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.crashes import url as url  # a fixture: pytest finds it by this name
from tests.integration.store.test_async import CALLS, fetch


@pytest.fixture(autouse=True)
def _fresh_calls() -> Iterator[None]:
    CALLS.clear()
    yield
    CALLS.clear()


def test_decorated_async_step_runs_plainly_outside_a_task() -> None:
    """Awaited outside any task, a decorated async step is an ordinary coroutine."""
    assert asyncio.run(fetch(4)) == 40
    assert asyncio.run(fetch(4)) == 40
    assert CALLS == ["fetch 4", "fetch 4"]
