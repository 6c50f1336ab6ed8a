"""The CLI shows an offloaded value as where it lives, never as broken JSON.

``cairn show`` (text and ``--json``) and ``cairn ops`` (``--json`` and
``--csv``) name the blob's size, hash and URI instead of fetching a value that
may be hundreds of megabytes. Runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from cairn import Cairn, Context
from cairn.cli import app as cli
from cairn.clock import FakeClock
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
