"""The app ``cairn worker`` runs in the wait-and-kill test (test_wait_sigkill.py).

Task ``change(app_id)``: step ``propose`` (one call, ``POST
{CAIRN_TEST_API_URL}/propose/<task id>``), then ``ctx.wait_for("approval")``,
then, if the payload says ``ok``, ``ctx.once(op_key("apply", app_id), ...)``,
which charges ``POST {CAIRN_TEST_PAY_URL}/charges`` with the key as its
``Idempotency-Key`` and, in doubt, asks the payment server (reconcile). Both
servers are in the test process and count every call.

Set by environment variable, read when the module is imported:

* ``CAIRN_TEST_HOLD_AT``: a fault point (``before_suspend``): the run writes
  ``held`` in ``CAIRN_TEST_GATE_DIR`` there and waits until the test removes it;
* ``CAIRN_TEST_KILL_AT``: a fault point (``before_suspend``, ``after_act``):
  the process SIGKILLs itself there, once (a marker file in the gate folder
  says it did, so the next worker goes through).
"""

from __future__ import annotations

import os
import signal
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from cairn import Cairn, Context, op_key
from cairn.testing import set_fault_hook

HOLD_SECONDS = 60.0
app = Cairn(poll_interval=0.1)


def propose(task_id: str) -> dict[str, int]:
    """The proposal: one call to the test's API server."""
    url = f"{os.environ['CAIRN_TEST_API_URL']}/propose/{quote(task_id, safe='')}"
    request = urllib.request.Request(url, data=b"{}", method="POST")  # noqa: S310 - a local URL
    with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
        answer.read()
    return {"daily_budget": 150}


def charge(key: str, app_id: str, proposal: dict[str, int]) -> dict[str, Any]:
    response = httpx.post(
        f"{os.environ['CAIRN_TEST_PAY_URL']}/charges",
        json={"item": app_id, "amount": proposal["daily_budget"]},
        headers={"Idempotency-Key": key},
        timeout=30,
    )
    response.raise_for_status()
    charged: dict[str, Any] = response.json()
    return charged


def find_charge(key: str) -> dict[str, Any] | None:
    url = f"{os.environ['CAIRN_TEST_PAY_URL']}/charges"
    response = httpx.get(url, params={"key": key}, timeout=30)
    if response.status_code == httpx.codes.NOT_FOUND:
        return None
    response.raise_for_status()
    found: dict[str, Any] = response.json()
    return found


@app.task
def change(ctx: Context, app_id: str) -> dict[str, Any]:
    proposal = ctx.step("propose", propose, ctx.task_id)
    decision = ctx.wait_for("approval")
    if not decision.payload.get("ok"):
        return {"applied": None}
    applied = ctx.once(op_key("apply", app_id), charge, app_id, proposal, reconcile=find_charge)
    return {"applied": applied["id"]}


def _hook(point: str, task_id: str, seq: int, name: str) -> None:
    gate = Path(os.environ.get("CAIRN_TEST_GATE_DIR", "."))
    if point == os.environ.get("CAIRN_TEST_HOLD_AT"):
        held = gate / "held"
        held.write_text(str(os.getpid()))
        deadline = time.monotonic() + HOLD_SECONDS
        while held.exists() and time.monotonic() < deadline:
            time.sleep(0.005)  # real-sleep-ok: held here until the test lets it go
    if point == os.environ.get("CAIRN_TEST_KILL_AT"):
        try:
            os.close(os.open(gate / "killed", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        os.kill(os.getpid(), signal.SIGKILL)


set_fault_hook(app, _hook)
