"""The pytest plugin: the ``cairn_crash_check`` fixture.

Installed with cairn (entry point ``pytest11``), so any test can ask for it::

    def test_review_survives_crashes(cairn_crash_check):
        cairn_crash_check(
            "myproject.review:review_app",
            {"app_id": "app-01"},
            effects="myproject.review:ledger_entries",
        )

The fixture crashes the task at every boundary (``crash_at_every_step``) and
fails the test with the table of cases when any case fails. It returns the
``CrashReport`` otherwise. Each case's store and files stay under the test's
``tmp_path``, for a look after a failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import pytest

from cairn.testing.crash import CrashReport, crash_at_every_step


class CrashCheck(Protocol):
    """What ``cairn_crash_check`` hands a test: ``crash_at_every_step``'s signature."""

    def __call__(
        self, target: str, kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> CrashReport: ...


@pytest.fixture
def cairn_crash_check(tmp_path: Path) -> CrashCheck:
    """Crash a task at every boundary; fail the test with the table on any problem."""
    runs = 0

    def check(target: str, kwargs: Mapping[str, Any] | None = None, **options: Any) -> CrashReport:
        nonlocal runs
        runs += 1
        options.setdefault("workdir", tmp_path / f"cairn-crash-{runs}")
        report = crash_at_every_step(target, kwargs, **options)
        if not report.ok:
            pytest.fail(report.table(), pytrace=False)
        return report

    return check
