"""A process frozen past its lease inside ``ctx.once`` never acts twice.

Process A runs a one-task charge batch (``pause_script.py``, lease 2 s) and
freezes itself with SIGSTOP inside the operation: after claiming the key and
before its outside call, or after the call and before recording its answer.
While A is frozen, process B runs the same batch: it waits until A's lease has
lapsed, takes the task over, finds the key in doubt and settles it by its policy
(under the default policy, an operator follows the error's advice with
``cairn ops resolve``, and a third run finishes). Only then is A woken with
SIGCONT.

What the payment server in this test process counts is the truth: every key is
charged exactly once, and A, woken, makes no call. What the store holds is B's
history: A writes nothing into it, and a charge A learned of after losing its
task is kept only as the key's late result. Every case runs on SQLite and on
PostgreSQL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from cairn.store import open_store
from cairn.store.records import OperationRecord
from tests.acceptance.pause_script import KEY, TASK_ID
from tests.servers import PaymentServer, wait_until

pytestmark = pytest.mark.acceptance

ROOT = Path(__file__).resolve().parents[2]
LEASE_SECONDS = 2.0
# Generous bounds for a loaded machine; nothing here waits for them unless it fails.
START_TIMEOUT_SECONDS = 60.0
RUN_TIMEOUT_SECONDS = 120.0
CLI = [sys.executable, "-c", "from cairn.cli import main; main()"]


@dataclass(frozen=True)
class Scene:
    store: str
    server: PaymentServer
    policy: str
    marker: Path


def _command(scene: Scene, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tests.acceptance.pause_script",
        "--store",
        scene.store,
        "--server",
        scene.server.url,
        "--policy",
        scene.policy,
        "--lease",
        str(LEASE_SECONDS),
        *extra,
    ]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}


def _stopped(pid: int) -> bool:
    """True once the process is in the stopped state (SIGSTOP took effect)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].split()[0] == "T"


def _freeze_a(scene: Scene, point: str) -> subprocess.Popen[str]:
    """Start A, and freeze it (SIGSTOP) while it holds at ``point``."""
    a = subprocess.Popen(
        _command(scene, "--stop-at", point, "--marker", str(scene.marker)),
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    held = wait_until(
        lambda: scene.marker.exists() or a.poll() is not None, START_TIMEOUT_SECONDS, poll=0.02
    )
    assert held, f"A did not reach {point}"
    assert a.poll() is None, f"A ended before {point}: {a.communicate()}"
    os.kill(a.pid, signal.SIGSTOP)
    assert wait_until(lambda: _stopped(a.pid), START_TIMEOUT_SECONDS, poll=0.01)
    scene.marker.unlink()  # once woken, A goes on from exactly where it held
    return a


def _run_b(scene: Scene) -> subprocess.CompletedProcess[str]:
    """Another process runs the batch to its end (it waits out A's lease first)."""
    return subprocess.run(
        _command(scene),
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
        check=False,
    )


def _cli(scene: Scene, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args, "--store", scene.store],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
        check=False,
    )


def _wake(a: subprocess.Popen[str]) -> tuple[str, str]:
    os.kill(a.pid, signal.SIGCONT)
    out, err = a.communicate(timeout=RUN_TIMEOUT_SECONDS)
    return out, err


def _operation(scene: Scene) -> OperationRecord:
    store = open_store(scene.store)
    try:
        op = store.get_operation("", KEY)
        task = store.get_task(TASK_ID)
    finally:
        store.close()
    assert op is not None
    assert task is not None
    assert task.status == "completed", task
    return op


def _settle_as_operator(scene: Scene, b: subprocess.CompletedProcess[str]) -> None:
    """Under the default policy B stops at the key in doubt; a person looks at the
    payment server, settles the key as the error says, and runs the batch again."""
    assert b.returncode == 1, b.stderr
    assert json.loads(b.stdout)["failures"] == ["cairn.errors.InDoubtOperation"], b.stdout
    charge = scene.server.charge_for(KEY)
    if charge is None:
        resolved = _cli(scene, "ops", "resolve", KEY, "--retry")
    else:
        resolved = _cli(scene, "ops", "resolve", KEY, "--result", json.dumps(charge))
    assert resolved.returncode == 0, resolved.stderr
    again = _run_b(scene)
    assert again.returncode == 0, again.stderr


def _play(scene: Scene, point: str) -> tuple[str, str]:
    """A freezes at ``point``; B (and the operator) finish; then A is woken."""
    a = _freeze_a(scene, point)
    try:
        b = _run_b(scene)
        if scene.policy == "raise":
            _settle_as_operator(scene, b)
        else:
            assert b.returncode == 0, b.stderr
        requests_before_waking = scene.server.requests
    finally:
        woken = _wake(a)
    assert scene.server.requests == requests_before_waking, f"A called after waking: {woken}"
    return woken


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'pause.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.mark.parametrize("policy", ["reconcile", "retry", "raise"])
def test_frozen_before_its_call_never_calls(store: str, policy: str, tmp_path: Path) -> None:
    """A freezes after claiming the key, before its outside call, past its lease. B
    takes over, finds the key in doubt, and (by its policy, or an operator's
    `ops resolve --retry`) charges it. A, woken, checks its lease by its own
    clock, finds its task gone, and stops with LeaseLost: the key is charged once,
    by one request, and A wrote nothing and learned nothing."""
    honor = policy == "retry"  # the premise of on_doubt="retry": the API dedupes keys
    with PaymentServer(honor_keys=honor) as server:
        scene = Scene(store, server, policy, tmp_path / "frozen")
        _, a_log = _play(scene, "after_claim")
        assert server.requests_by_key() == {KEY: 1}
        assert server.charges_by_item() == {"item-00": 1}
    assert "no longer holds its lease" in a_log, a_log
    op = _operation(scene)
    assert op.status == "completed"
    assert op.late_result is None
    assert op.result is not None
    assert json.loads(op.result)["id"] == "ch_1"


@pytest.mark.parametrize("policy", ["reconcile", "retry", "raise"])
def test_frozen_after_its_call_records_nothing_in_the_new_owners_history(
    store: str, policy: str, tmp_path: Path
) -> None:
    """A freezes after its charge went through, before recording the answer, past
    its lease. B takes over and settles the key by its policy: reconcile finds
    the charge; retry sends the same key again and the API dedupes it; under the
    default an operator sees the charge and records it with `ops resolve
    --result`. A, woken, may not record into the history B now owns: it keeps the
    charge only as the key's late result and stops with LeaseLost. One charge."""
    honor = policy == "retry"
    with PaymentServer(honor_keys=honor) as server:
        scene = Scene(store, server, policy, tmp_path / "frozen")
        _, a_log = _play(scene, "after_act")
        expected_requests = 2 if policy == "retry" else 1
        assert server.requests_by_key() == {KEY: expected_requests}
        assert server.charges_by_item() == {"item-00": 1}
        charge = server.charge_for(KEY)
    assert "no longer holds its lease" in a_log, a_log
    op = _operation(scene)
    assert op.status == "completed"
    assert op.result is not None
    assert charge is not None
    assert json.loads(op.result)["id"] == charge["id"]
    assert op.late_result is not None, "A's late answer is kept for the audit"
    assert json.loads(op.late_result)["id"] == charge["id"]
