"""A process frozen past its lease inside ``ctx.once`` never acts twice.

Process A runs a one-task charge batch (``pause_script.py``, lease 2 s) and
freezes itself with SIGSTOP inside the operation: after claiming the key and
before its outside call, or after the call and before recording its answer.
While A is frozen, process B runs the same batch: it waits until A's lease has
lapsed, takes the task over, finds the key in doubt and settles it by its policy
(under the default policy, an operator follows the error's advice with
``cairn ops resolve``, and a third run finishes). Only then is A woken with
SIGCONT. The three doubt policies play at once, each with a store and a payment
server of its own.

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
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from cairn.store import open_store
from cairn.store.records import OperationRecord
from tests.acceptance.pause_script import KEY, TASK_ID
from tests.servers import PaymentServer, wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
LEASE_SECONDS = 2.0
# Generous bounds for a loaded machine; nothing here waits for them unless it fails.
START_TIMEOUT_SECONDS = 60.0
RUN_TIMEOUT_SECONDS = 120.0
CLI = [sys.executable, "-c", "from cairn.cli import main; main()"]
POLICIES = ("reconcile", "retry", "raise")


@dataclass(frozen=True)
class Scene:
    store: str
    server: PaymentServer
    policy: str
    marker: Path
    # Set for a machine suspended, not a process stopped: A's monotonic clock
    # leaves out the seconds the test writes here before waking it.
    suspend: Path | None = None


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


def _start_a(scene: Scene, point: str) -> subprocess.Popen[str]:
    """Start A, to hold at ``point`` of its charge."""
    suspend = () if scene.suspend is None else ("--suspend-file", str(scene.suspend))
    return subprocess.Popen(
        _command(scene, "--stop-at", point, "--marker", str(scene.marker), *suspend),
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _freeze(scene: Scene, a: subprocess.Popen[str], point: str) -> None:
    """Freeze A (SIGSTOP) while it holds at ``point``."""
    held = wait_until(
        lambda: scene.marker.exists() or a.poll() is not None, START_TIMEOUT_SECONDS, poll=0.02
    )
    assert held, f"A did not reach {point}"
    assert a.poll() is None, f"A ended before {point}: {a.communicate()}"
    os.kill(a.pid, signal.SIGSTOP)
    assert wait_until(lambda: _stopped(a.pid), START_TIMEOUT_SECONDS, poll=0.01)
    scene.marker.unlink()  # once woken, A goes on from exactly where it held


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


def _wake(scene: Scene, a: subprocess.Popen[str], frozen_at: float) -> tuple[str, str]:
    """Wake A; for a suspended machine, its monotonic clock first learns that it
    stood still for as long as A was frozen."""
    if scene.suspend is not None:
        scene.suspend.write_text(str(time.monotonic() - frozen_at))
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
        # --yes: the claim is seconds old, so resolve warns that its claimant may
        # still act; the operator knows A is held before ctx.once's own check.
        resolved = _cli(scene, "ops", "resolve", KEY, "--retry", "--yes")
    else:
        resolved = _cli(scene, "ops", "resolve", KEY, "--result", json.dumps(charge))
    assert resolved.returncode == 0, resolved.stderr
    again = _run_b(scene)
    assert again.returncode == 0, again.stderr


def _finish_without_a(scene: Scene) -> None:
    """While A is frozen: B runs the batch to its end (and, under the default
    policy, an operator settles the key and runs it again)."""
    b = _run_b(scene)
    if scene.policy == "raise":
        _settle_as_operator(scene, b)
    else:
        assert b.returncode == 0, b.stderr


def _play(scenes: list[Scene], point: str) -> list[str]:
    """In every scene at once (one per policy, each with its own store and payment
    server): A freezes at ``point``; B (and the operator) finish; then A is
    woken, and must send nothing more. Returns each A's log."""
    started = [_start_a(scene, point) for scene in scenes]
    woken: list[tuple[str, str]] = []
    frozen_at = time.monotonic()
    try:
        for scene, a in zip(scenes, started, strict=True):
            _freeze(scene, a, point)
        frozen_at = time.monotonic()
        with ThreadPoolExecutor(len(scenes)) as pool:
            list(pool.map(_finish_without_a, scenes))  # re-raises what failed
        before_waking = [scene.server.requests for scene in scenes]
    finally:
        woken = [_wake(scene, a, frozen_at) for scene, a in zip(scenes, started, strict=True)]
    for scene, requests, (_, log) in zip(scenes, before_waking, woken, strict=True):
        assert scene.server.requests == requests, f"A called after waking ({scene.policy}): {log}"
    return [log for _, log in woken]


StoreFor = Callable[[str], str]


@pytest.fixture(params=["sqlite", "postgres"])
def store_for(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFor:
    """A fresh store per policy, of each backend (on PostgreSQL, a schema of its own
    in the test's database)."""
    if request.param == "sqlite":
        return lambda policy: f"sqlite:///{tmp_path / f'pause-{policy}.db'}"
    url = str(request.getfixturevalue("pg_url"))
    return lambda policy: f"{url}?schema=pause_{policy}"


@contextmanager
def _scenes(
    store_for: StoreFor, tmp_path: Path, *, suspended: bool = False
) -> Iterator[list[Scene]]:
    """One scene per doubt policy, each with its own store and payment server. The
    server dedupes keys only for on_doubt="retry" (its premise); for the others it
    charges every request, so any second call shows as a second charge.
    ``suspended``: A's machine is suspended rather than A stopped."""
    with ExitStack() as stack:
        yield [
            Scene(
                store_for(policy),
                stack.enter_context(PaymentServer(honor_keys=policy == "retry")),
                policy,
                tmp_path / f"frozen-{policy}",
                tmp_path / f"asleep-{policy}" if suspended else None,
            )
            for policy in POLICIES
        ]


def test_frozen_before_its_call_never_calls(store_for: StoreFor, tmp_path: Path) -> None:
    """A freezes after claiming the key, before its outside call, past its lease. B
    takes over, finds the key in doubt, and (by its policy, or an operator's
    `ops resolve --retry`) charges it. A, woken, checks its lease by its own
    clock, finds its task gone, and stops with LeaseLost: under every policy the
    key is charged once, by one request, and A wrote nothing and learned nothing."""
    with _scenes(store_for, tmp_path) as scenes:
        logs = _play(scenes, "after_claim")
        for scene, a_log in zip(scenes, logs, strict=True):
            assert scene.server.requests_by_key() == {KEY: 1}, scene.policy
            assert scene.server.charges_by_item() == {"item-00": 1}, scene.policy
            assert "no longer holds its lease" in a_log, (scene.policy, a_log)
            op = _operation(scene)
            assert op.status == "completed"
            assert op.late_result is None
            assert op.result is not None
            assert json.loads(op.result)["id"] == "ch_1"


def test_frozen_after_its_call_records_nothing_in_the_new_owners_history(
    store_for: StoreFor, tmp_path: Path
) -> None:
    """A freezes after its charge went through, before recording the answer, past
    its lease. B takes over and settles the key by its policy: reconcile finds
    the charge; retry sends the same key again and the API dedupes it; under the
    default an operator sees the charge and records it with `ops resolve
    --result`. A, woken, may not record into the history B now owns: it keeps the
    charge only as the key's late result and stops with LeaseLost. One charge."""
    with _scenes(store_for, tmp_path) as scenes:
        logs = _play(scenes, "after_act")
        for scene, a_log in zip(scenes, logs, strict=True):
            expected_requests = 2 if scene.policy == "retry" else 1
            assert scene.server.requests_by_key() == {KEY: expected_requests}, scene.policy
            assert scene.server.charges_by_item() == {"item-00": 1}, scene.policy
            charge = scene.server.charge_for(KEY)
            assert "no longer holds its lease" in a_log, (scene.policy, a_log)
            op = _operation(scene)
            assert op.status == "completed"
            assert op.result is not None
            assert charge is not None
            assert json.loads(op.result)["id"] == charge["id"]
            assert op.late_result is not None, "A's late answer is kept for the audit"
            assert json.loads(op.late_result)["id"] == charge["id"]


def test_a_machine_suspended_before_the_call_never_calls(
    store_for: StoreFor, tmp_path: Path
) -> None:
    """A's machine is suspended (a closed laptop lid) after A claimed the key and
    before its outside call, past its lease: its monotonic clock stood still
    meanwhile, its wall clock did not. B takes over and charges the key by its
    policy. A, woken, must not trust the monotonic clock alone: its lease looks
    fresh by it, but the wall clock (which B's takeover was judged by) says it
    lapsed, so A renews, is refused, and stops with LeaseLost. One charge per
    key, from one request, under every policy."""
    with _scenes(store_for, tmp_path, suspended=True) as scenes:
        logs = _play(scenes, "after_claim")
        for scene, a_log in zip(scenes, logs, strict=True):
            assert scene.server.requests_by_key() == {KEY: 1}, (scene.policy, a_log)
            assert scene.server.charges_by_item() == {"item-00": 1}, scene.policy
            assert "no longer holds its lease" in a_log, (scene.policy, a_log)
            assert _operation(scene).late_result is None
