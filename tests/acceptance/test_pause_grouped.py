"""Several tasks of one process frozen past their lease inside ``ctx.once``,
with group commit on: none of them acts twice.

Process A runs a four-task charge batch (``pause_script.py``, lease 2 s, group
commit on) all at once: on four threads, each holding inside its operation
(even items after claiming the key, odd items after the charge went through),
or as four coroutines of one event loop whose writes are awaited (an async
task's path through group commit), until the first to reach its hold blocks
the loop. The test freezes A there with SIGSTOP. Process B runs the same batch:
it takes the four tasks over once their leases lapse and settles each key by
asking the payment server (reconcile). Then A is woken: the writes its tasks
make meet in the group-commit queue and are refused each on its own fence, and
a task held before its call finds its lease gone and does not call.

The payment server in this test process is the truth: each item is charged
once, and A, woken, sends nothing. Both stores, threads and async.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cairn.store import open_store
from tests.acceptance.charge_script import pay_key
from tests.acceptance.pause_script import BATCH
from tests.acceptance.test_pause_once import (
    LEASE_SECONDS,
    ROOT,
    RUN_TIMEOUT_SECONDS,
    START_TIMEOUT_SECONDS,
    _env,
    _stopped,
)
from tests.servers import PaymentServer, wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

ITEMS = [f"item-{i:02d}" for i in range(4)]


def _command(store: str, server: PaymentServer, mode: str, *extra: str) -> list[str]:
    """pause_script for the four-item batch, group commit on, threads or async."""
    return [
        sys.executable,
        "-m",
        "tests.acceptance.pause_script",
        *("--store", store, "--server", server.url, "--policy", "reconcile"),
        *("--lease", str(LEASE_SECONDS), "--items", str(len(ITEMS)), "--group-commit"),
        *(["--async"] if mode == "async" else []),
        *extra,
    ]


def _markers(marker: Path) -> list[Path]:
    return [marker.with_name(f"{marker.name}.{item}") for item in ITEMS]


def _freeze_when_held(a: subprocess.Popen[str], marker: Path, mode: str) -> list[Path]:
    """Wait until A holds (every thread, or the event loop's first hold), freeze
    it, and clear the markers so that, woken, it goes on; the markers it held at."""
    markers = _markers(marker)
    enough = len(ITEMS) if mode == "threads" else 1

    def held() -> bool:
        return sum(m.exists() for m in markers) >= enough or a.poll() is not None

    assert wait_until(held, START_TIMEOUT_SECONDS, poll=0.02), "A never held"
    assert a.poll() is None, f"A ended before holding: {a.communicate()}"
    os.kill(a.pid, signal.SIGSTOP)
    assert wait_until(lambda: _stopped(a.pid), START_TIMEOUT_SECONDS, poll=0.01)
    holding = [m for m in markers if m.exists()]
    for m in holding:
        m.unlink()
    return holding


@pytest.mark.parametrize("mode", ["threads", "async"])
def test_a_process_frozen_with_grouped_writes_in_flight_charges_nothing_more(
    store_url: str, tmp_path: Path, mode: str
) -> None:
    """A holds four tasks inside their charges (group commit on) and is frozen
    past its lease; B takes them over and settles each key with the payment
    server. Woken, A sends no request: every item is charged exactly once, each
    task A held says it lost its lease, and B's history stands (a charge A had
    made is the key's result, A's answer kept only as the late result)."""
    marker = tmp_path / "held"
    with PaymentServer(honor_keys=False) as server:
        a = subprocess.Popen(
            _command(store_url, server, mode, "--hold-all", "--marker", str(marker)),
            cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            holding = _freeze_when_held(a, marker, mode)
            b = subprocess.run(
                _command(store_url, server, mode),
                cwd=ROOT, env=_env(), capture_output=True, text=True,
                timeout=RUN_TIMEOUT_SECONDS, check=False,
            )  # fmt: skip
            before_waking = server.requests
        finally:
            os.kill(a.pid, signal.SIGCONT)
            _, a_log = a.communicate(timeout=RUN_TIMEOUT_SECONDS)
        after_waking = server.requests
        charges = server.charges_by_item()
    assert b.returncode == 0, b.stderr
    assert json.loads(b.stdout)["counts"] == {"completed": len(ITEMS)}
    assert after_waking == before_waking, f"A called after waking:\n{a_log}"
    assert charges == dict.fromkeys(ITEMS, 1), a_log
    held_items = [m.name.rsplit(".", 1)[1] for m in holding]
    for item in held_items:
        assert f"'{BATCH}/item={item}': this process no longer holds its lease" in a_log, a_log
    store = open_store(store_url)
    try:
        ops = {item: store.get_operation("", pay_key(item)) for item in ITEMS}
    finally:
        store.close()
    assert all(op is not None and op.status == "completed" for op in ops.values())
    for item in held_items:
        op = ops[item]
        assert op is not None
        charged_before_freeze = ITEMS.index(item) % 2 == 1
        assert (op.late_result is not None) == charged_before_freeze, (item, a_log)
