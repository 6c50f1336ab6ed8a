"""A real cairn batch that charges a payment API once per item.

The operation acceptance tests run this file as a program, against the
``PaymentServer`` of ``tests/servers.py`` that the test process serves::

    python charge_script.py --store PATH --server URL
        [--policy reconcile|retry|raise] [--items 20] [--concurrency 4]
        [--kill-after-claim ITEM --kill-point after_claim|after_act] [--marker PATH]

Batch ``charges`` has one task per item ``item-00``, ``item-01``, ... Each task
prices its item in step ``price``, charges it with
``ctx.once(op_key("pay", item), charge, ...)``, which POSTs to ``/charges`` with
the operation key as ``Idempotency-Key``, and writes step ``receipt``. The
policy says what a task does when it finds its charge in doubt (a run died
between claiming the key and recording the answer):

- ``reconcile``: ask the payment API (``GET /charges?key=``) whether it charged;
- ``retry``: charge again with the same key (the API dedupes it);
- ``raise``: stop the task with ``InDoubtOperation``.

``--kill-after-claim ITEM`` makes the run SIGKILL itself inside that item's
operation, at ``--kill-point``: ``after_claim`` (key claimed, nothing sent) or
``after_act`` (charged, answer not yet recorded). It fires once: a marker file
says it already did, so a restart goes through.

Prints a JSON summary and exits 0 when every task completed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from cairn import Cairn, Context, TaskDef, op_key
from cairn.testing import set_fault_hook

BATCH = "charges"
POLICIES = ("reconcile", "retry", "raise")
KILL_POINTS = ("after_claim", "after_act")
HTTP_TIMEOUT_SECONDS = 10.0


def item_name(index: int) -> str:
    return f"item-{index:02d}"


def task_id(item: str) -> str:
    """The id cairn gives the batch task for ``{"item": item}``."""
    return f"{BATCH}/item={item}"


def pay_key(item: str) -> str:
    """The operation key of an item's charge."""
    return op_key("pay", item)


def price(item: str) -> int:
    """The amount charged for ``item``, in cents: fixed per item."""
    return 100 + int(item.rsplit("-", 1)[1])


class PaymentClient:
    """The payment API as the task sees it."""

    def __init__(self, base_url: str) -> None:
        self._base = base_url.rstrip("/")
        # One client for all worker threads: building one costs ~0.1 s (TLS setup).
        self._http = httpx.Client(timeout=HTTP_TIMEOUT_SECONDS)

    def __enter__(self) -> PaymentClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.close()

    def charge(self, key: str, item: str, amount: int) -> dict[str, Any]:
        """Charge ``amount`` for ``item`` under idempotency key ``key``."""
        response = self._http.post(
            f"{self._base}/charges",
            json={"item": item, "amount": amount},
            headers={"Idempotency-Key": key},
        )
        response.raise_for_status()
        charge: dict[str, Any] = response.json()
        return charge

    def find_charge(self, key: str) -> dict[str, Any] | None:
        """The charge made under ``key``, or None if the API never charged it."""
        response = self._http.get(f"{self._base}/charges", params={"key": key})
        if response.status_code == httpx.codes.NOT_FOUND:
            return None
        response.raise_for_status()
        charge: dict[str, Any] = response.json()
        return charge


def self_killer(item: str | None, point: str, marker: Path) -> Callable[[str, str, int, str], None]:
    """A fault hook that SIGKILLs this process once, inside ``item``'s charge."""
    target = None if item is None else pay_key(item)

    def hook(hook_point: str, task: str, seq: int, name: str) -> None:
        if target is None or (hook_point, name) != (point, target):
            return
        try:
            # O_EXCL: exactly one run ever sees the marker as new.
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        os.kill(os.getpid(), signal.SIGKILL)

    return hook


def once_policy(policy: str, payments: PaymentClient) -> dict[str, Any]:
    """The ``ctx.once`` keyword arguments for ``policy``."""
    if policy == "reconcile":
        return {"reconcile": payments.find_charge}
    if policy == "retry":
        return {"on_doubt": "retry"}
    return {"on_doubt": "raise"}


def build_app(
    options: argparse.Namespace, payments: PaymentClient
) -> tuple[Cairn, TaskDef[..., dict[str, Any]]]:
    """The app and its charge task, wired to this run's policy and kill point."""
    app = Cairn(str(options.store))
    policy = once_policy(options.policy, payments)
    marker = options.marker or Path(f"{options.store}.killed")
    set_fault_hook(app, self_killer(options.kill_after_claim, options.kill_point, marker))

    @app.task(name="charge")
    def charge_item(ctx: Context, item: str) -> dict[str, Any]:
        amount = ctx.step("price", price, item)
        charge = ctx.once(pay_key(item), payments.charge, item, amount, **policy)
        return ctx.step("receipt", receipt, item, amount, charge)

    return app, charge_item


def receipt(item: str, amount: int, charge: dict[str, Any]) -> dict[str, Any]:
    return {"item": item, "amount": amount, "charge_id": charge["id"]}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True, help="SQLite file of the batch")
    parser.add_argument("--server", required=True, help="base URL of the payment API")
    parser.add_argument("--policy", choices=POLICIES, default="reconcile")
    parser.add_argument("--items", type=int, default=20, help="items to charge")
    parser.add_argument("--concurrency", type=int, default=4, help="worker threads")
    parser.add_argument("--kill-after-claim", metavar="ITEM", default=None)
    parser.add_argument("--kill-point", choices=KILL_POINTS, default="after_claim")
    parser.add_argument("--marker", type=Path, default=None, help="fire-once marker file")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    payments = PaymentClient(options.server)
    app, charge_item = build_app(options, payments)
    with app, payments:
        items = [{"item": item_name(i)} for i in range(options.items)]
        report = app.run_batch(
            BATCH, charge_item, items, concurrency=options.concurrency, progress=False
        )
    summary = {
        "pid": os.getpid(),
        "ok": report.ok,
        "counts": report.counts,
        "failures": [
            {"task_id": failure.task_id, "error_type": failure.error_type}
            for failure in report.failures
        ],
    }
    sys.stdout.write(json.dumps(summary) + "\n")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
