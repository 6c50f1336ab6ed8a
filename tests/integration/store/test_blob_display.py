"""The CLI shows an offloaded value as where it lives, never as broken JSON.

``cairn show`` (text and ``--json``) and ``cairn ops`` (``--json`` and
``--csv``) name the blob's size, hash and URI instead of fetching a value that
may be hundreds of megabytes. Runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from typer.testing import CliRunner

from cairn import Cairn, Context
from cairn.admin import task_view
from cairn.cli import app as cli
from cairn.clock import FakeClock
from cairn.store import admin
from tests.crashes import url as url  # a fixture: pytest finds it by this name

BIG = "x" * 5000


def test_offloaded_results_are_shown_as_blob_references(
    url: str, clock: FakeClock, tmp_path: Path
) -> None:
    """A task result and an operation result above the inline limit are listed
    with their size and URI; the JSON outputs stay valid JSON."""
    blobs = tmp_path / "blobs"
    with Cairn(url, clock=clock, blobs=str(blobs), inline_limit=1024) as app:

        @app.task
        def big(ctx: Context) -> str:
            return str(ctx.once("charge:1", lambda key: BIG))

        assert app.run(big, task_id="t") == BIG
    runner = CliRunner()
    shown = runner.invoke(cli, ["show", "t", "--store", url])
    assert shown.exit_code == 0, shown.output
    assert "in the blob store: 5,002 bytes" in shown.output
    as_json = runner.invoke(cli, ["show", "t", "--store", url, "--json"])
    assert as_json.exit_code == 0, as_json.output
    result = json.loads(as_json.stdout)["task"]["result"]
    assert result["blob"]["size"] == 5002
    assert result["blob"]["uri"].startswith("file://")
    ops = runner.invoke(cli, ["ops", "--store", url, "--json"])
    assert ops.exit_code == 0, ops.output
    (op,) = json.loads(ops.stdout)["operations"]
    assert op["result"]["blob"]["size"] == 5002
    csv = runner.invoke(cli, ["ops", "--store", url, "--csv"])
    assert csv.exit_code == 0, csv.output
    assert "in the blob store" in csv.stdout


def test_task_view_shows_offloaded_values_by_size_and_hash(
    url: str, clock: FakeClock, tmp_path: Path
) -> None:
    """The admin API's task view: the result and the step output that went to
    the blob store are blob references with size and sha256, not JSON."""
    with Cairn(url, clock=clock, blobs=str(tmp_path / "blobs"), inline_limit=1024) as app:

        @app.task
        def big(ctx: Context) -> str:
            return str(ctx.step("make", lambda: BIG))

        assert app.run(big, task_id="t") == BIG
        view = task_view(admin(app.store), "t")
    assert view is not None
    assert view.result is not None
    assert view.result.blob is not None
    assert view.result.json_text is None
    assert view.result.blob.size == 5002
    assert view.result.blob.sha256 == hashlib.sha256(json.dumps(BIG).encode()).hexdigest()
    (step,) = view.steps
    assert step.output is not None
    assert step.output.blob == view.result.blob
