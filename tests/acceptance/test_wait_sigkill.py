"""``ctx.wait_for`` across SIGKILL and a signal that races the suspend.

Real ``cairn worker --burst`` processes run one approval task of
``wait_app.py``: a proposal (one call to an API server), a wait for
``approval``, then a charge through ``ctx.once`` (a payment server, asked on
doubt). Both servers are in this test process and count every call. The
signal is sent with the real ``cairn signal`` command.

* Killed between recording the wait and suspending: the task is left running
  under a dead process; the signal comes meanwhile; the next worker resumes
  the task at once and takes the signal.
* Held there while the signal comes (so the suspend meets the signal in its
  own statement), then killed just after the charge went through: the next
  worker resumes it, finds the charge by asking, and records it.

Either way the proposal was made once and the card charged once. Both stores.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import pytest

from cairn.store import open_store
from tests.servers import ApiServer, PaymentServer, wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.acceptance.wait_app:app"
TASK_ID = "changes/app_id=a1"
KEY = "apply/a1"
CLI = [sys.executable, "-c", "from cairn.cli import main; main()"]
TIMEOUT_SECONDS = 60


@pytest.fixture
def servers() -> Iterator[tuple[ApiServer, PaymentServer]]:
    with ApiServer() as api, PaymentServer(honor_keys=False) as payments:
        yield api, payments


def _env(api: ApiServer, payments: PaymentServer, gate: Path, **hooks: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env |= {"CAIRN_TEST_API_URL": api.url, "CAIRN_TEST_PAY_URL": payments.url}
    env |= {"CAIRN_TEST_GATE_DIR": str(gate)}
    env |= {f"CAIRN_TEST_{name.upper()}": point for name, point in hooks.items()}
    return env


def _cli(store: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args, "--store", store],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_SECONDS, check=False,
    )  # fmt: skip


def _worker(store: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, "worker", APP, "--burst", "--concurrency=1", "--idle-wait=0.2", "--store", store],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def _enqueue(store: str, env: dict[str, str], tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    items.write_text('{"app_id": "a1"}\n')
    done = _cli(store, env, "enqueue", APP, "changes", "change", str(items))
    assert done.returncode == 0, done.stdout + done.stderr


def _finish(worker: subprocess.Popen[str]) -> tuple[int, str]:
    out, _ = worker.communicate(timeout=TIMEOUT_SECONDS)
    return worker.returncode, out


def _assert_done_once(store: str, api: ApiServer, payments: PaymentServer) -> None:
    assert [unquote(arrival.path) for arrival in api.arrivals] == [f"/propose/{TASK_ID}"]
    assert payments.requests_by_key() == {KEY: 1}
    opened = open_store(store)
    try:
        task = opened.get_task(TASK_ID)
        op = opened.get_operation("", KEY)
    finally:
        opened.close()
    assert task is not None
    assert task.status == "completed", task
    assert op is not None
    assert op.status == "completed"


def test_killed_before_suspending_the_next_worker_takes_the_signal_sent_meanwhile(
    store_url: str, tmp_path: Path, servers: tuple[ApiServer, PaymentServer]
) -> None:
    """Worker A records the wait and dies (SIGKILL) before suspending: the task
    is running under a dead process. `cairn signal` meanwhile stores the signal.
    Worker B resumes the task at once, replays the proposal without calling it,
    takes the signal at the wait and charges once."""
    api, payments = servers
    env = _env(api, payments, tmp_path)
    _enqueue(store_url, env, tmp_path)
    code, out = _finish(_worker(store_url, _env(api, payments, tmp_path, kill_at="before_suspend")))
    assert code == -signal.SIGKILL, out
    sent = _cli(store_url, env, "signal", TASK_ID, "approval", '{"ok": true}')
    assert sent.returncode == 0, sent.stdout + sent.stderr
    code, out = _finish(_worker(store_url, env))
    assert code == 0, out
    assert "resuming task" in out
    _assert_done_once(store_url, api, payments)


def test_a_signal_racing_the_suspend_is_taken_and_a_kill_after_the_charge_charges_once(
    store_url: str, tmp_path: Path, servers: tuple[ApiServer, PaymentServer]
) -> None:
    """Worker A is held between recording its wait and suspending while `cairn
    signal` stores the signal (the task is not waiting yet, so nothing wakes).
    Let go, A's suspend finds the signal in the same statement and goes on: it
    charges, and dies (SIGKILL) before recording the charge. Worker B resumes
    the task at once, finds the key in doubt, asks the payment server, which has
    the charge, and records it: one proposal, one charge."""
    api, payments = servers
    env = _env(api, payments, tmp_path)
    _enqueue(store_url, env, tmp_path)
    hooks = _env(api, payments, tmp_path, hold_at="before_suspend", kill_at="after_act")
    a = _worker(store_url, hooks)
    held = tmp_path / "held"
    try:
        assert wait_until(lambda: held.exists() or a.poll() is not None, TIMEOUT_SECONDS)
        assert a.poll() is None, a.communicate()
        sent = _cli(store_url, env, "signal", TASK_ID, "approval", '{"ok": true}')
        assert sent.returncode == 0, sent.stdout + sent.stderr
    finally:
        held.unlink(missing_ok=True)
    code, out = _finish(a)
    assert code == -signal.SIGKILL, out
    assert payments.requests_by_key() == {KEY: 1}  # A charged before it died
    code, out = _finish(_worker(store_url, env))
    assert code == 0, out
    assert "resuming task" in out
    _assert_done_once(store_url, api, payments)
