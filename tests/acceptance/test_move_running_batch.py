"""Moving a batch to another machine while it runs (scenario 6), in the middle of
a charge: the charge is not made twice.

Process A runs a one-task charge batch (``pause_script.py``) and holds right
after the payment server charged the card, before recording it. While it
holds, ``cairn export`` copies the batch; then A's machine goes away (SIGKILL).
The file is imported into a new SQLite store, "the other machine", where the
batch is run again. There the charge's key was claimed and never recorded: it
is in doubt, as after a crash. Asking the payment server (reconcile) finds the
charge and records it; under the default policy the task stops with
InDoubtOperation for a person to settle. Either way the payment server in this
test process charged the card once. The source is each store in turn.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cairn.cli import app as cli_app
from cairn.store import open_store
from tests.acceptance.pause_script import BATCH, ITEM, KEY, TASK_ID
from tests.acceptance.test_pause_once import ROOT, RUN_TIMEOUT_SECONDS, START_TIMEOUT_SECONDS, _env
from tests.servers import PaymentServer, wait_until

pytestmark = pytest.mark.acceptance


def _run(store: str, server: PaymentServer, policy: str, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "tests.acceptance.pause_script", "--store", store,
        "--server", server.url, "--policy", policy, *extra,
    ]  # fmt: skip


@pytest.mark.parametrize("policy", ["reconcile", "raise"])
def test_a_batch_exported_mid_charge_charges_once_on_the_other_machine(
    store_url: str, tmp_path: Path, policy: str
) -> None:
    """Exported while its one task holds between the charge and its record, the
    batch is imported elsewhere and run there: the key is in doubt there, so
    reconcile finds the charge and records it (the task completes) and the
    default policy stops the task; the card was charged once."""
    marker, export = tmp_path / "held", tmp_path / "moving.cairn"
    elsewhere = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    with PaymentServer(honor_keys=False) as server:
        hold = ("--stop-at", "after_act", "--marker", str(marker))
        a = subprocess.Popen(
            _run(store_url, server, policy, *hold),
            cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            held = wait_until(
                lambda: marker.exists() or a.poll() is not None, START_TIMEOUT_SECONDS
            )
            assert held, "A never reached its charge"
            assert a.poll() is None, a.communicate()
            out = CliRunner().invoke(
                cli_app, ["export", "-b", BATCH, str(export), "--store", store_url]
            )
        finally:
            a.send_signal(signal.SIGKILL)  # the first machine goes away
            a.communicate()
        assert out.exit_code == 0, out.output
        got = CliRunner().invoke(cli_app, ["import", str(export), "--store", elsewhere])
        assert got.exit_code == 0, got.output
        there = subprocess.run(
            _run(elsewhere, server, policy),
            cwd=ROOT, env=_env(), capture_output=True, text=True,
            timeout=RUN_TIMEOUT_SECONDS, check=False,
        )  # fmt: skip
        charged = (server.requests_by_key(), server.charges_by_item())
    assert charged == ({KEY: 1}, {ITEM: 1}), there.stderr
    store = open_store(elsewhere)
    try:
        task, op = store.get_task(TASK_ID), store.get_operation("", KEY)
    finally:
        store.close()
    assert task is not None
    assert op is not None
    if policy == "reconcile":
        assert there.returncode == 0, there.stderr
        assert (task.status, op.status) == ("completed", "completed")
    else:
        assert json.loads(there.stdout)["failures"] == ["cairn.errors.InDoubtOperation"]
        assert (task.status, op.status) == ("failed", "in_doubt")
