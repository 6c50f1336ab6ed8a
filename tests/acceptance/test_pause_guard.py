"""A process frozen inside its operation's function, before it sends.

``ctx.once`` checks the lease before it calls the function; what the function
does before its request leaves (building it, a token refresh, DNS, TLS) is past
that check. Process A (``pause_script.py``, lease 2 s) holds inside the
function with its request built, and the test freezes it there (SIGSTOP) past
its lease. Process B takes the task over, finds the key in doubt and settles it
by its policy (under the default one an operator resolves it with
``cairn ops resolve``). Then A is woken with SIGCONT.

With ``ctx.before_send()`` called right before sending, A finds its lease
lapsed and its task taken, and sends nothing: the payment server of this test
(it charges every request: any second call is a second charge) counts one
charge per key, on SQLite and on PostgreSQL, under every policy.

Without the guard, the operator who runs ``cairn ops resolve --retry`` is
warned that the claimant may still act, and nothing changes until they
confirm with ``--yes``; and the warning is right: A, woken, sends its request.
"""

from __future__ import annotations

import json
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cairn.store import open_store
from tests.acceptance.pause_script import KEY
from tests.acceptance.test_pause_once import ROOT as ROOT_DIR
from tests.acceptance.test_pause_once import (
    Scene,
    StoreFor,
    _cli,
    _command,
    _env,
    _freeze,
    _operation,
    _run_b,
    _scenes,
    _wake,
    store_for,
)

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]
__all__ = ["store_for"]  # the fixture, shared with test_pause_once


def _start_a(scene: Scene, *, guard: bool) -> subprocess.Popen[str]:
    """Start A, to hold inside its operation's function with its request built."""
    extra = ["--stop-at", "in_function", "--marker", str(scene.marker)]
    return subprocess.Popen(
        _command(scene, *extra, *(["--guard"] if guard else [])),
        cwd=ROOT_DIR,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _settle(scene: Scene) -> None:
    """While A is frozen: B runs the batch; under the default policy it stops at
    the key in doubt, and the operator, who sees no charge at the payment
    server, confirms the retry (the warning is the next test's subject)."""
    b = _run_b(scene)
    if scene.policy != "raise":
        assert b.returncode == 0, b.stderr
        return
    assert b.returncode == 1, b.stderr
    assert json.loads(b.stdout)["failures"] == ["cairn.errors.InDoubtOperation"], b.stdout
    assert scene.server.charge_for(KEY) is None
    resolved = _cli(scene, "ops", "resolve", KEY, "--retry", "--yes")
    assert resolved.returncode == 0, resolved.stderr
    again = _run_b(scene)
    assert again.returncode == 0, again.stderr


def test_frozen_inside_its_function_with_the_guard_never_sends(
    store_for: StoreFor, tmp_path: Path
) -> None:
    """A freezes inside the operation's function, request built, past its lease;
    B takes over and the key is charged by its policy. A, woken, calls
    ctx.before_send(), finds its lease lapsed and its task taken, and stops with
    LeaseLost: one request and one charge per key under every policy, and A
    learned nothing to record."""
    with _scenes(store_for, tmp_path) as scenes:
        started = [_start_a(scene, guard=True) for scene in scenes]
        frozen_at = time.monotonic()
        try:
            for scene, a in zip(scenes, started, strict=True):
                _freeze(scene, a, "in_function")
            frozen_at = time.monotonic()
            with ThreadPoolExecutor(len(scenes)) as pool:
                list(pool.map(_settle, scenes))
        finally:
            woken = [_wake(scene, a, frozen_at) for scene, a in zip(scenes, started, strict=True)]
        for scene, (_, a_log) in zip(scenes, woken, strict=True):
            assert scene.server.requests_by_key() == {KEY: 1}, (scene.policy, a_log)
            assert scene.server.charges_by_item() == {"item-00": 1}, scene.policy
            assert "no longer holds its lease" in a_log, (scene.policy, a_log)
            op = _operation(scene)
            assert (op.status, op.late_result) == ("completed", None)


def test_without_the_guard_resolve_warns_that_the_claimant_may_still_act(
    store_for: StoreFor, tmp_path: Path
) -> None:
    """A freezes inside the function of an operation that does not call the
    guard. B stops at the key in doubt, and its error says the claimant's lease
    lapsed and that it may still wake and send. `cairn ops resolve --retry`
    warns, changes nothing and exits 1; with --yes it settles the key, and B
    charges it. Woken, A sends its own request: a second charge, which is what
    the warning was about."""
    with _scenes(store_for, tmp_path) as all_scenes:
        scene = next(s for s in all_scenes if s.policy == "raise")
        a = _start_a(scene, guard=False)
        frozen_at = time.monotonic()
        try:
            _freeze(scene, a, "in_function")
            frozen_at = time.monotonic()
            b = _run_b(scene)
            assert b.returncode == 1, b.stderr
            error = _recorded_doubt(scene)
            assert "then its lease lapsed" in error
            assert "may still wake and send its request" in error
            refused = _cli(scene, "ops", "resolve", KEY, "--retry")
            assert refused.returncode == 1, refused.stderr
            assert refused.stderr.count("error: ") == 1, refused.stderr
            assert "may have been paused rather than killed" in refused.stderr
            assert "add --yes" in refused.stderr
            assert "Nothing changed" in refused.stderr
            assert _recorded_doubt(scene)  # still in doubt
            resolved = _cli(scene, "ops", "resolve", KEY, "--retry", "--yes")
            assert resolved.returncode == 0, resolved.stderr
            again = _run_b(scene)
            assert again.returncode == 0, again.stderr
            assert scene.server.requests_by_key() == {KEY: 1}
        finally:
            _, a_log = _wake(scene, a, frozen_at)
        assert scene.server.requests_by_key() == {KEY: 2}, a_log


def _recorded_doubt(scene: Scene) -> str:
    """The error recorded with the key in doubt (its status must say so)."""
    store = open_store(scene.store)
    try:
        op = store.get_operation("", KEY)
    finally:
        store.close()
    assert op is not None
    assert op.status == "in_doubt"
    assert op.error is not None
    return str(json.loads(op.error)["message"])
