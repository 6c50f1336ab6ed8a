"""A batch whose steps' writes share commits (group commit, the default), for
the SIGKILL test (``test_group_commit_sigkill.py``)::

    python groupcommit_script.py STORE_URL SERVER_URL {async|threads} TASKS STEPS

Batch ``gc`` has one task per ``n`` in ``0..TASKS-1``, run all at once (as
async tasks at concurrency TASKS, or sync tasks on as many threads). Step ``i``
of a task POSTs ``/effect/<task>/<i>`` to the test's server (its effect, counted
there) and returns ``n * 100 + i``. Right after the step returns to the task's
code, the task POSTs ``/done/<task>/<i>``: the server now knows the step was
reported done, and may SIGKILL this process at once (it gets the pid from the
``X-Pid`` header). Exits 0 when every task completed.
"""

from __future__ import annotations

import os
import sys
import urllib.request

from cairn import Cairn, Context


def _post(url: str) -> None:
    request = urllib.request.Request(  # noqa: S310 - the test's own http://127.0.0.1 server
        url, data=b"", method="POST", headers={"X-Pid": str(os.getpid())}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
        answer.read()


def main(store: str, server: str, mode: str, tasks: int, steps: int) -> int:
    app = Cairn(store)

    def effect(task_id: str, n: int, i: int) -> int:
        _post(f"{server}/effect/{task_id}/{i}")
        return n * 100 + i

    async def aeffect(task_id: str, n: int, i: int) -> int:
        return effect(task_id, n, i)

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

    task = app.task(name="gc")(async_task if mode == "async" else sync_task)
    with app:
        report = app.run_batch(
            "gc", task, [{"n": n} for n in range(tasks)], concurrency=tasks, progress=False
        )
    return 0 if report.counts == {"completed": tasks} else 1


if __name__ == "__main__":
    store_url, server_url, run_mode, task_count, step_count = sys.argv[1:]
    raise SystemExit(main(store_url, server_url, run_mode, int(task_count), int(step_count)))
