"""A 100,000-task batch on PostgreSQL, running, stopped with ``cairn cancel --batch``.

The batch is a runaway: a real ``cairn worker`` (four threads) runs it, each
task making one call after another to a server in this test process, which
counts them. ``cairn cancel --batch`` (the real command, run in this process
so the statements it sends can be counted) must stop it: once the command has
returned, no task starts, and a task already inside a step stops at its next
write. So the server sees at most one more call per worker thread after the
command returned, and every task not completed is cancelled.

The command costs a few statements, not one per task: cancelling 100,000 tasks
one statement at a time took five minutes on PostgreSQL, while the workers went
on starting the tasks not yet reached. The tasks are written straight into the
store (enqueueing 100,000 through ``app.enqueue`` takes about 20 s here).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cairn.cli import app as cli_app
from cairn.store import open_store
from cairn.store.postgres import PostgresStore
from cairn.store.sqlcore import Tx
from tests.acceptance.outage_app import TASK_NAME
from tests.servers import ApiServer, wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BATCH = "big"
TASKS = 100_000
CONCURRENCY = 4
RUNNING_CALLS = 40  # calls seen before the cancel: the batch is well under way
TIMEOUT_SECONDS = 90
# Statements a batch-wide cancel may send, whatever the batch's size: the
# batch's check, and one change per status it cancels from.
FEW_STATEMENTS = 10


def fill(url: str) -> None:
    """``TASKS`` pending tasks of ``call_steps`` in batch ``big``, written in one
    transaction, as ``app.enqueue`` would write them."""
    store = open_store(url)
    now = datetime.now(UTC)
    stamp = store._ts(now)  # type: ignore[attr-defined]
    insert = (
        "INSERT INTO tasks (id, batch, item_key, name, args, codec, status, created_at, "
        "updated_at) VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?)"
    )
    rows = [
        (f"{BATCH}/n={n}", BATCH, f"n={n}", TASK_NAME, f'{{"n": {n}}}', "json", stamp, stamp)
        for n in range(TASKS)
    ]

    def write(tx: Tx) -> int:
        return tx.exec_many(insert, rows)

    try:
        store.ensure_batch(BATCH, TASK_NAME, now)
        assert store._atomically(write) == TASKS  # type: ignore[attr-defined]
    finally:
        store.close()


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement PostgreSQL stores of this process send, while the test runs."""
    sent: list[str] = []
    exec_one: Callable[..., Any] = PostgresStore._exec

    def counting(self: PostgresStore, statement: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(statement)
        return exec_one(self, statement, *args, **kwargs)

    monkeypatch.setattr(PostgresStore, "_exec", counting)
    return sent


def start_worker(url: str, api: ApiServer, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env["CAIRN_TEST_API_URL"] = api.url
    command = [
        sys.executable, "-c", "from cairn.cli import main; main()", "worker",
        "tests.acceptance.outage_app:app", "--burst", f"--concurrency={CONCURRENCY}",
        "--idle-wait=0.2", f"--store={url}",
    ]  # fmt: skip
    with log.open("wb") as out:
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


@pytest.mark.timeout(240)
def test_cancel_batch_stops_a_running_100k_task_batch_at_once(
    pg_url: str, tmp_path: Path, counted: list[str]
) -> None:
    """A worker runs a 100,000-task batch; `cairn cancel --batch` returns having
    sent a few statements, after which the server sees at most one more call per
    worker thread; the worker runs out of work and exits, and every task is
    completed or cancelled, most of them cancelled."""
    fill(pg_url)
    log = tmp_path / "worker.log"
    with ApiServer() as api:
        worker = start_worker(pg_url, api, log)
        try:
            started = wait_until(lambda: len(api.arrivals) >= RUNNING_CALLS, TIMEOUT_SECONDS)
            assert started, log.read_text(errors="replace")
            counted.clear()
            cancel = CliRunner().invoke(cli_app, ["cancel", "--batch", BATCH, "--store", pg_url])
            statements, calls_then = len(counted), len(api.arrivals)
            code = worker.wait(TIMEOUT_SECONDS)
        finally:
            if worker.poll() is None:
                worker.send_signal(signal.SIGKILL)
                worker.wait()
        late = len(api.arrivals) - calls_then
    assert cancel.exit_code == 0, cancel.output
    assert statements <= FEW_STATEMENTS, f"{statements} statements for one cancel"
    assert late <= CONCURRENCY, f"{late} calls after the cancel returned"
    assert code == 0, log.read_text(errors="replace")
    store = open_store(pg_url)
    try:
        counts = dict(store.batch_counts(BATCH))
    finally:
        store.close()
    assert set(counts) <= {"completed", "cancelled"}, counts
    assert sum(counts.values()) == TASKS
    assert counts["cancelled"] > TASKS - RUNNING_CALLS
    assert "task(s) -> cancelled" in cancel.stdout
