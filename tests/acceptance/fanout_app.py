"""The app ``cairn worker`` runs in the fan-out outage test (test_fanout_outage.py).

Two task functions, each the caller of one kind of fan-out:

* ``mapped(n)``: ``ctx.map`` over four items (``m0``..``m3``), four at once;
* ``family(n)``: two child tasks (``child``, keys ``c0`` and ``c1``), spawned
  and joined.

Every item and every child makes one HTTP call,
``POST {CAIRN_TEST_API_URL}/call/<task id>/<label>/<pid>`` (the task id
URL-quoted), to a server in the test process that logs it on arrival and
answers when the test lets it: that is the call's work, counted outside the
store. The lease is cairn's default (30 s).
"""

from __future__ import annotations

import os
import urllib.request
from typing import Any
from urllib.parse import quote

from cairn import Cairn, Context
from cairn.retry import NO_RETRY

ITEMS = ("m0", "m1", "m2", "m3")
CHILDREN = ("c0", "c1")
CALL_TIMEOUT_SECONDS = 120


def call(task_id: str, label: str) -> str:
    """One call to the test's server; returns who made it."""
    api = os.environ["CAIRN_TEST_API_URL"]
    url = f"{api}/call/{quote(task_id, safe='')}/{label}/{os.getpid()}"
    request = urllib.request.Request(url, data=b"{}", method="POST")  # noqa: S310 - a local URL
    with urllib.request.urlopen(request, timeout=CALL_TIMEOUT_SECONDS) as answer:  # noqa: S310
        answer.read()
    return f"{label}@{os.getpid()}"


def call_item(row: dict[str, str]) -> str:
    return call(row["task"], row["item"])


def make_app(store: str | None = None) -> Cairn:
    """A new app with the three tasks registered; the default lease."""
    # No task retries: these calls never fail, so a failure is the store's.
    made = Cairn(store, poll_interval=0.1, task_retry=NO_RETRY)

    @made.task(name="mapped")
    def mapped(ctx: Context, n: int) -> list[str]:
        rows = [{"task": ctx.task_id, "item": item} for item in ITEMS]
        return list(ctx.map(call_item, rows, key=lambda row: row["item"], concurrency=len(ITEMS)))

    @made.task(name="child")
    def child(ctx: Context, label: str) -> str:
        return str(ctx.step("call", call, ctx.task_id, label))

    @made.task(name="family")
    def family(ctx: Context, n: int) -> list[Any]:
        children = [ctx.spawn(child, key=label, label=label) for label in CHILDREN]
        return list(ctx.join(children))

    return made


app = make_app()
