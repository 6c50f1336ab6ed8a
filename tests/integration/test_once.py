"""``ctx.once``: a side effect runs at most once per key, and its result is kept.

Covers the ordinary path (claim, act, record), what later calls with the same
key see, scopes, the ``@cairn.operation`` form, async functions, the audit row,
waiting on a live claimant, failures and retries, and bad input. The tests that
use a store, on every backend, are in ``store/test_once.py``.
"""

from __future__ import annotations

from datetime import date

import pytest

import cairn
from cairn import (
    CairnError,
)
from tests.integration.store.test_once import settings_key


def test_operation_decorator_outside_a_task_is_a_clear_error() -> None:
    """Calling a declared operation outside a task raises CairnError and calls nothing."""
    applied: list[str] = []

    @cairn.operation(key=settings_key)
    def apply_settings(key: str, app_id: str, day: date) -> str:
        applied.append(key)
        return "applied"

    with pytest.raises(CairnError, match="outside a cairn task"):
        apply_settings("app123", date(2026, 5, 24))
    assert applied == []
