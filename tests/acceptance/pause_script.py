"""A one-task charge batch that can freeze itself (SIGSTOP) inside its operation.

The pause acceptance tests run this file as a program, against the
``PaymentServer`` of ``tests/servers.py`` that the test process serves::

    python pause_script.py --store URL --server URL [--policy reconcile|retry|raise]
        [--lease 2] [--stop-at after_claim|after_act --marker PATH] [--suspend-file PATH]

Batch ``paused`` has one task, ``paused/item=item-00``: step ``price``, then
``ctx.once(op_key("pay", item), charge)``, which POSTs to ``/charges`` with the
operation key as ``Idempotency-Key``, then step ``receipt``.

``--stop-at`` makes the run hold inside the operation, at ``after_claim`` (the
key is claimed, nothing sent yet) or ``after_act`` (the charge was made, its
answer not yet recorded): it writes ``--marker`` and waits there until the
marker is gone. The test stops the process with SIGSTOP while it waits (a
process cannot stop itself exactly: its own SIGSTOP takes effect a moment
after ``kill`` returns, long enough to start a request), removes the marker,
and wakes it with SIGCONT only once its lease has long expired and another
process owns the task.

``--suspend-file`` gives the app a clock that reads the machine as suspended
(a closed laptop lid) rather than only the process as stopped: its monotonic
clock leaves out the seconds the test writes into that file before waking the
process, as ``CLOCK_MONOTONIC`` (``time.monotonic`` on Linux) leaves out the
time a machine spent suspended, while its wall clock, corrected when the
machine wakes, counts them.

Prints a JSON summary and exits 0 when the task completed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from cairn import Cairn, Context
from cairn.clock import SystemClock
from cairn.testing import set_fault_hook
from tests.acceptance.charge_script import (
    POLICIES,
    PaymentClient,
    once_policy,
    pay_key,
    price,
    receipt,
)

BATCH = "paused"
ITEM = "item-00"
TASK_ID = f"{BATCH}/item={ITEM}"
KEY = pay_key(ITEM)
STOP_POINTS = ("after_claim", "after_act")


def holder(point: str | None, marker: Path | None) -> Any:
    """A fault hook that holds the run once at ``point`` of the charge, where the
    test freezes it, until the test removes ``marker``."""

    def hook(hook_point: str, task: str, seq: int, name: str) -> None:
        if point is None or marker is None or (hook_point, name) != (point, KEY):
            return
        marker.write_text(str(os.getpid()))
        while marker.exists():
            time.sleep(0.005)  # real-sleep-ok: held here for the test's SIGSTOP

    return hook


class SuspendedClock(SystemClock):
    """The real clock of a machine that was suspended for the seconds written in
    ``path``: its monotonic clock stood still meanwhile, its wall clock did not."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def monotonic(self) -> float:
        try:
            asleep = float(self._path.read_text())
        except (OSError, ValueError):
            asleep = 0.0
        return time.monotonic() - asleep


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, help="store URL")
    parser.add_argument("--server", required=True, help="base URL of the payment API")
    parser.add_argument("--policy", choices=POLICIES, default="reconcile")
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--stop-at", choices=STOP_POINTS, default=None)
    parser.add_argument("--marker", type=Path, default=None)
    parser.add_argument("--suspend-file", type=Path, default=None)
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    payments = PaymentClient(options.server)
    clock = SystemClock() if options.suspend_file is None else SuspendedClock(options.suspend_file)
    app = Cairn(options.store, lease=options.lease, poll_interval=0.1, clock=clock)
    set_fault_hook(app, holder(options.stop_at, options.marker))
    policy = once_policy(options.policy, payments)

    @app.task(name="charge")
    def charge_item(ctx: Context, item: str) -> dict[str, Any]:
        amount = ctx.step("price", price, item)
        charge = ctx.once(pay_key(item), payments.charge, item, amount, **policy)
        return ctx.step("receipt", receipt, item, amount, charge)

    with app, payments:
        report = app.run_batch(BATCH, charge_item, [{"item": ITEM}], concurrency=1, progress=False)
    summary = {
        "pid": os.getpid(),
        "ok": report.ok,
        "counts": report.counts,
        "failures": [failure.error_type for failure in report.failures],
    }
    sys.stdout.write(json.dumps(summary) + "\n")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
