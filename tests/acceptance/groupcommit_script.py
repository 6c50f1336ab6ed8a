"""A batch whose steps' writes share commits (group commit, the default), for
the SIGKILL test (``test_group_commit_sigkill.py``)::

    python groupcommit_script.py STORE_URL SERVER_URL MODE TASKS STEPS

MODE is ``async`` or ``threads`` (steps), ``once-async`` or ``once-threads``
(each position is a ``ctx.once`` whose effect is the POST), or ``conv-async`` or
``conv-threads`` (each position is a step, then a conversation message
``"<n>-<i>"`` appended, then the "done": so the message is what was just
reported written).

Batch ``gc`` has one task per ``n`` in ``0..TASKS-1``, run all at once (as
async tasks at concurrency TASKS, or sync tasks on as many threads). Step ``i``
of a task POSTs ``/effect/<task>/<i>`` to the test's server (its effect, counted
there) and returns ``n * 100 + i``. Right after the step returns to the task's
code, the task POSTs ``/done/<task>/<i>``: the server now knows the step was
reported done, and may SIGKILL this process at once (it gets the pid from the
``X-Pid`` header). An operation whose claimant died is reconciled by asking
the server whether its effect arrived (GET ``/seen/<task>/<i>``), so an
operation runs exactly once. Exits 0 when every task completed.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from typing import Any

from cairn import Cairn, Context


def _post(url: str) -> None:
    request = urllib.request.Request(  # noqa: S310 - the test's own http://127.0.0.1 server
        url, data=b"", method="POST", headers={"X-Pid": str(os.getpid())}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
        answer.read()


def _seen(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=30) as answer:  # noqa: S310 - the test's server
        return bool(json.loads(answer.read())["seen"])


def main(store: str, server: str, mode: str, tasks: int, steps: int) -> int:
    app = Cairn(store, group_commit=True)

    def effect(task_id: str, n: int, i: int) -> int:
        _post(f"{server}/effect/{task_id}/{i}")
        return n * 100 + i

    async def aeffect(task_id: str, n: int, i: int) -> int:
        return effect(task_id, n, i)

    def once_effect(key: str, task_id: str, n: int, i: int) -> int:
        return effect(task_id, n, i)

    async def aonce_effect(key: str, task_id: str, n: int, i: int) -> int:
        return effect(task_id, n, i)

    def reconcile(task_id: str, n: int, i: int) -> Any:
        # The server is the outside system: it knows whether the effect arrived.
        return lambda key: n * 100 + i if _seen(f"{server}/seen/{task_id}/{i}") else None

    def sync_once(ctx: Context, n: int) -> int:
        total = 0
        for i in range(steps):
            key = f"{ctx.task_id}/{i}"
            args = (ctx.task_id, n, i)
            total += ctx.once(key, once_effect, *args, reconcile=reconcile(*args))
            _post(f"{server}/done/{ctx.task_id}/{i}")
        return total

    async def async_once(ctx: Context, n: int) -> int:
        total = 0
        for i in range(steps):
            key = f"{ctx.task_id}/{i}"
            args = (ctx.task_id, n, i)
            total += await ctx.once(key, aonce_effect, *args, reconcile=reconcile(*args))
            _post(f"{server}/done/{ctx.task_id}/{i}")
        return total

    def sync_conv(ctx: Context, n: int) -> int:
        conv = ctx.conversation("main")
        total = 0
        for i in range(steps):
            total += ctx.step("s", effect, ctx.task_id, n, i)
            conv.append({"role": "user", "content": f"{n}-{i}"})
            _post(f"{server}/done/{ctx.task_id}/{i}")
        return total

    async def async_conv(ctx: Context, n: int) -> int:
        conv = ctx.conversation("main")
        total = 0
        for i in range(steps):
            total += await ctx.step("s", aeffect, ctx.task_id, n, i)
            conv.append({"role": "user", "content": f"{n}-{i}"})
            _post(f"{server}/done/{ctx.task_id}/{i}")
        return total

    def sync_task(ctx: Context, n: int) -> int:
        total = 0
        for i in range(steps):
            total += ctx.step("s", effect, ctx.task_id, n, i)
            _post(f"{server}/done/{ctx.task_id}/{i}")
        return total

    async def async_task(ctx: Context, n: int) -> int:
        total = 0
        for i in range(steps):
            total += await ctx.step("s", aeffect, ctx.task_id, n, i)
            _post(f"{server}/done/{ctx.task_id}/{i}")
        return total

    functions: dict[str, Any] = {
        "async": async_task, "threads": sync_task, "once-async": async_once,
        "once-threads": sync_once, "conv-async": async_conv, "conv-threads": sync_conv,
    }  # fmt: skip
    task = app.task(name="gc")(functions[mode])
    with app:
        report = app.run_batch(
            "gc", task, [{"n": n} for n in range(tasks)], concurrency=tasks, progress=False
        )
    return 0 if report.counts == {"completed": tasks} else 1


if __name__ == "__main__":
    store_url, server_url, run_mode, task_count, step_count = sys.argv[1:]
    raise SystemExit(main(store_url, server_url, run_mode, int(task_count), int(step_count)))
