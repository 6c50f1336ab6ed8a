"""Cancelling a running task, and per-task time limits: both stop a task at its
next step boundary, and neither can be swallowed by ``except Exception``.

The tests that use a store, on every backend, are in
``store/test_cancel_and_time_limits.py``.
"""

from __future__ import annotations

import pytest

from cairn import Cairn
from tests.crashes import url as url  # a fixture: pytest finds it by this name


def test_max_duration_must_be_positive() -> None:
    """A zero or negative limit is refused when the task is declared."""
    app = Cairn("sqlite:///:memory:")
    with pytest.raises(ValueError, match="max_duration must be a positive number of seconds"):
        app.task(max_duration=0)(lambda ctx: None)
