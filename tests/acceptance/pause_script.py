"""A one-task charge batch that can freeze itself (SIGSTOP) inside its operation.

The pause acceptance tests run this file as a program, against the
``PaymentServer`` of ``tests/servers.py`` that the test process serves::

    python pause_script.py --store URL --server URL [--policy reconcile|retry|raise]
        [--lease 2] [--stop-at after_claim|in_function|after_act --marker PATH] [--guard]
        [--suspend-file PATH]
        [--items N [--hold-all --marker PATH]] [--group-commit] [--async]

Batch ``paused`` has one task, ``paused/item=item-00`` (``--items N``: N tasks,
``item-00``.., all run at once, on threads or with ``--async`` as coroutines):
step ``price``, then ``ctx.once(op_key("pay", item), charge)``, which POSTs to
``/charges`` with the operation key as ``Idempotency-Key``, then step
``receipt``. ``--group-commit`` turns group commit on (it is on by default on
PostgreSQL), so the writes of tasks that meet share commits.

``--stop-at`` makes the run hold inside the operation, at ``after_claim`` (the
key is claimed, nothing sent yet), ``in_function`` (inside the operation's own
function, its request built but not sent: the window ``ctx.once``'s own check
cannot cover) or ``after_act`` (the charge was made, its answer not yet
recorded): it writes ``--marker`` and waits there until the marker is gone.
``--guard``: the operation's function calls ``ctx.before_send()`` right before
it sends. ``--hold-all`` holds every item's charge, even items after
their claim and odd ones after their call, each with marker ``--marker``.ITEM
(an async run's first hold blocks its event loop, so there only the first
item to get there holds). A charge holds once: woken, the run goes on. The
test stops the process with SIGSTOP while it waits (a process cannot stop
itself exactly: its own SIGSTOP takes effect a moment after ``kill`` returns,
long enough to start a request), removes the marker, and wakes it with
SIGCONT only once its lease has long expired and another process owns the
task.

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
import asyncio
import json
import logging
import os
import sys
import threading
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
STOP_POINTS = ("after_claim", "after_act", "in_function")


def holder(holds: dict[str, tuple[str, Path]], *, first_only: bool = False) -> Any:
    """A fault hook that holds the run at each key's point of its charge
    (``holds``: key -> (point, marker)), where the test freezes it, until the
    test removes that key's marker; once per key, or (``first_only``) once in
    all, for the first key to get there."""
    held: set[str] = set()
    lock = threading.Lock()

    def hook(hook_point: str, task: str, seq: int, name: str) -> None:
        point, marker = holds.get(name, (None, None))
        if marker is None or hook_point != point:
            return
        with lock:
            if name in held or (first_only and held):
                return
            held.add(name)
        marker.write_text(str(os.getpid()))
        while marker.exists():
            time.sleep(0.005)  # real-sleep-ok: held here for the test's SIGSTOP

    return hook


def holds_of(options: argparse.Namespace, items: list[str]) -> dict[str, tuple[str, Path]]:
    """Where each item's charge holds: the one item at ``--stop-at`` (marker
    ``--marker``); with ``--hold-all``, every item, alternately after its claim
    and after its call (marker ``--marker``.ITEM)."""
    if options.marker is None:
        return {}
    if options.hold_all:
        return {
            pay_key(item): (
                STOP_POINTS[i % 2],  # after_claim, after_act
                options.marker.with_name(f"{options.marker.name}.{item}"),
            )
            for i, item in enumerate(items)
        }
    if options.stop_at is None:
        return {}
    return {pay_key(items[0]): (options.stop_at, options.marker)}


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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, help="store URL")
    parser.add_argument("--server", required=True, help="base URL of the payment API")
    parser.add_argument("--policy", choices=POLICIES, default="reconcile")
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--stop-at", choices=STOP_POINTS, default=None)
    parser.add_argument("--marker", type=Path, default=None)
    parser.add_argument("--suspend-file", type=Path, default=None)
    parser.add_argument("--items", type=int, default=1, help="tasks, all run at once")
    parser.add_argument("--hold-all", action="store_true", help="every item holds")
    parser.add_argument("--group-commit", action="store_true", help="Cairn(group_commit=True)")
    parser.add_argument("--async", dest="use_async", action="store_true", help="async tasks")
    parser.add_argument("--guard", action="store_true", help="ctx.before_send() before sending")
    return parser.parse_args(argv)


def charge_task(
    app: Cairn,
    payments: PaymentClient,
    use_async: bool,
    policy: Any,
    *,
    hook: Any = None,
    guard: bool = False,
) -> Any:
    """The batch's task: price, charge once, receipt. Async: every function is
    a coroutine function, so each write is awaited (an async task's path
    through group commit) and the charge leaves from a thread while the event
    loop runs the other tasks. ``hook`` (sync only) is called at point
    ``in_function`` inside the operation's function, before it sends;
    ``guard``: the function then calls ``ctx.before_send()``."""

    def charge_item(ctx: Context, item: str) -> dict[str, Any]:
        amount = ctx.step("price", price, item)

        def pay(key: str, item: str, amount: int) -> dict[str, Any]:
            if hook is not None:
                hook("in_function", ctx.task_id, 0, key)  # the request is built
            if guard:
                ctx.before_send()
            return payments.charge(key, item, amount)

        charge = ctx.once(pay_key(item), pay, item, amount, **policy)
        return ctx.step("receipt", receipt, item, amount, charge)

    async def aprice(item: str) -> int:
        return price(item)

    async def acharge(key: str, item: str, amount: int) -> dict[str, Any]:
        return await asyncio.to_thread(payments.charge, key, item, amount)

    async def areceipt(item: str, amount: int, charge: dict[str, Any]) -> dict[str, Any]:
        return receipt(item, amount, charge)

    async def acharge_item(ctx: Context, item: str) -> dict[str, Any]:
        amount = await ctx.step("price", aprice, item)
        charge: dict[str, Any] = await ctx.once(pay_key(item), acharge, item, amount, **policy)
        done: dict[str, Any] = await ctx.step("receipt", areceipt, item, amount, charge)
        return done

    return app.task(name="charge")(acharge_item if use_async else charge_item)


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    payments = PaymentClient(options.server)
    clock = SystemClock() if options.suspend_file is None else SuspendedClock(options.suspend_file)
    # group_commit=None: as the store decides (on for PostgreSQL, off on SQLite NORMAL).
    grouped = True if options.group_commit else None
    app = Cairn(
        options.store, lease=options.lease, poll_interval=0.1, clock=clock, group_commit=grouped
    )
    items = [f"item-{i:02d}" for i in range(options.items)]
    # An async run's hold blocks its event loop: only its first hold is kept.
    hook = holder(holds_of(options, items), first_only=options.use_async)
    set_fault_hook(app, hook)
    policy = once_policy(options.policy, payments)
    task = charge_task(app, payments, options.use_async, policy, hook=hook, guard=options.guard)
    with app, payments:
        rows = [{"item": item} for item in items]
        report = app.run_batch(BATCH, task, rows, concurrency=len(items), progress=False)
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
