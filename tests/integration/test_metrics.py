"""``cairn.observe.metrics`` and ``cairn metrics`` agree with counts taken by the
tasks themselves while they really ran, on SQLite (every backend's tests are in
``store/test_metrics.py``)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from typer.testing import CliRunner

from cairn import Cairn
from cairn.cli import app as cli_app
from cairn.clock import FakeClock
from cairn.observe import Window, compute
from cairn.observe.metrics import family_of
from tests.integration.store.test_metrics import (
    BATCH,
    ITEMS,
    Tally,
    run_with_takeover,
)


def test_window_and_batch_filters(app: Cairn, clock: FakeClock) -> None:
    """--since counts tasks created since then; --batch one batch only."""
    tally = Tally()
    run_with_takeover(app, clock, tally)
    later = clock.now() + timedelta(hours=1)
    assert compute(app.store, Window(since=later)).tasks_by_status == {}
    assert sum(compute(app.store, Window(batch=BATCH)).tasks_by_status.values()) == ITEMS
    assert compute(app.store, Window(batch="other")).tasks_by_status == {}


def test_cli_metrics_json_and_text(app: Cairn, clock: FakeClock) -> None:
    """`cairn metrics --json` prints the same numbers; the text names each metric."""
    run_with_takeover(app, clock, Tally())
    runner = CliRunner()
    url = app.store.url
    as_json = runner.invoke(cli_app, ["metrics", "--store", url, "--json"])
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.stdout)
    assert data["restarts"]["restart_success_rate"] == 1.0
    assert data["redundancy"]["redundant_keys"] == 1
    text = runner.invoke(
        cli_app, ["metrics", "--store", url, "--batch", BATCH, "--since", "2026-05-01"]
    )
    assert text.exit_code == 0, text.output
    assert "restart success: 100.0%" in text.stdout
    assert "redundant execution:" in text.stdout
    bad = runner.invoke(cli_app, ["metrics", "--store", url, "--since", "yesterdayish"])
    assert bad.exit_code == 2


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("ad-review-2026-05-24", "ad-review"),
        ("ad-review-20260524", "ad-review"),
        ("nightly", "nightly"),
        ("a-b-c", "a-b-c"),
    ],
)
def test_batch_family(name: str, family: str) -> None:
    """Batches named alike but for a trailing date share a baseline."""
    assert family_of(name) == family
