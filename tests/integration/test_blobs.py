"""Large values go to the blob store; the record keeps a small, hash-checked reference.

These tests are SQLite's (or need no store); those for every backend are in
``store/test_blobs.py``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from cairn import Cairn, Context
from cairn.blobs import FileBlobStore
from cairn.clock import FakeClock
from tests.crashes import url as url  # a fixture: pytest finds it by this name
from tests.integration.store.test_blobs import report_rows


def test_a_sqlite_store_keeps_blobs_beside_its_file_by_default(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without blobs= or $CAIRN_BLOBS a SQLite store's blobs go to 'cairn.db-blobs'."""
    monkeypatch.delenv("CAIRN_BLOBS", raising=False)
    with Cairn(f"sqlite:///{tmp_path / 'cairn.db'}", clock=clock) as app:

        @app.task
        def big(ctx: Context) -> int:
            return len(ctx.step("rows", lambda: report_rows(2000)))

        assert app.run(big, task_id="b") == 2000
    found = list(FileBlobStore(tmp_path / "cairn.db-blobs").blobs())
    assert len(found) == 1
    assert found[0].size > 64 * 1024


def test_a_huge_step_output_logs_a_warning_naming_the_step(
    app: Cairn, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step output above the warning size logs one warning that names the step and
    the task and suggests returning a reference instead."""
    import cairn.engine.run

    monkeypatch.setattr(cairn.engine.run, "WARN_ABOVE", 100_000)
    monkeypatch.setattr("cairn.blobs.offload.WARN_ABOVE", 100_000)

    @app.task
    def huge(ctx: Context) -> int:
        return len(ctx.step("dump", lambda: "z" * 200_000))

    with caplog.at_level(logging.WARNING, logger="cairn"):
        assert app.run(huge, task_id="h") == 200_000
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "Step 'dump'" in warnings[0]
    assert "'h'" in warnings[0]
    assert "reference" in warnings[0]
