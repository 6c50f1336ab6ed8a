"""The app that ``cairn worker`` subprocesses run in the shared-limit tests.

``cairn worker tests.acceptance.limits_app:app --store URL`` runs task
``call_api``: one step that POSTs ``/call/N`` to the API at ``CAIRN_TEST_API_URL``
under the limit ``api``, declared as ``Rate(10, per=2.0)`` (the issue's 10 a
minute, with the window scaled down to 2 s so tests run in seconds), and task
``hold_slot``: one step under ``Concurrency(1)`` that appends ``task_id pid``
to ``CAIRN_TEST_COUNTS`` when it ends. If ``CAIRN_TEST_GATE_DIR`` is set, that
step first touches ``blocked-PID`` there and blocks for good (the test then
SIGKILLs the process holding the slot).

``CAIRN_TEST_LEASE`` sets the app's lease in seconds (default 30).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx

from cairn import Cairn, Concurrency, Context, Rate, TaskDef
from cairn.retry import NO_RETRY

RATE = Rate(10, per=2.0)
BLOCK_SECONDS = 60.0


def post(n: int) -> int:
    response = httpx.post(f"{os.environ['CAIRN_TEST_API_URL']}/call/{n}", timeout=30)
    response.raise_for_status()
    return n


def call_api(ctx: Context, n: int) -> int:
    return ctx.step("post", post, n, limit="api")


def hold(task_id: str) -> int:
    gate = os.environ.get("CAIRN_TEST_GATE_DIR")
    if gate:
        (Path(gate) / f"blocked-{os.getpid()}").touch()
        time.sleep(BLOCK_SECONDS)  # real-sleep-ok: holds the slot until SIGKILLed
    fd = os.open(os.environ["CAIRN_TEST_COUNTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{task_id} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    return os.getpid()


def hold_slot(ctx: Context, n: int) -> int:
    return ctx.step("hold", hold, ctx.task_id, limit="slot")


def make_app(store: str | None = None) -> tuple[Cairn, TaskDef[[int], int], TaskDef[[int], int]]:
    """A new app with both tasks registered (tests enqueue through their own)."""
    created = Cairn(
        store,
        lease=float(os.environ.get("CAIRN_TEST_LEASE") or 30.0),
        poll_interval=0.1,
        task_retry=NO_RETRY,
        limits={"api": RATE, "slot": Concurrency(1)},
    )
    return created, created.task(call_api), created.task(hold_slot)


app, _, _ = make_app()
