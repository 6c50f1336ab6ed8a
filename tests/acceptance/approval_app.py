"""The app the approval acceptance test runs in separate processes.

Task ``change(app_id)``: step ``propose``, then ``ctx.wait_for("approval")``,
then step ``apply`` if the payload says ``ok``. Each step appends
``task_id step pid`` to the file named by ``CAIRN_TEST_COUNTS`` (one line per
time a step function really ran), counted outside the store.

``python -m tests.acceptance.approval_app URL TASK_ID APP_ID`` runs the task
once with ``app.run`` and prints the result, or exits with code 3 when the
task is left waiting for its signal.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from cairn import Cairn, Context, TaskWaiting

app = Cairn()
WAITING_EXIT = 3


def count(task_id: str, step: str) -> str:
    """Append one count line (O_APPEND: whole lines even from many processes)."""
    fd = os.open(os.environ["CAIRN_TEST_COUNTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{task_id} {step} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    return f"{step}@{os.getpid()}"


@app.task
def change(ctx: Context, app_id: str) -> dict[str, Any]:
    """Propose a change, wait for a person's approval, apply it if approved."""
    proposed = ctx.step("propose", count, ctx.task_id, "propose")
    decision = ctx.wait_for("approval")
    applied = None
    if decision.payload.get("ok"):
        applied = ctx.step("apply", count, ctx.task_id, "apply")
    return {"app": app_id, "proposed": proposed, "applied": applied, "by": decision.payload}


def main(argv: list[str]) -> int:
    url, task_id, app_id = argv
    app.use_store(url)
    try:
        print(app.run(change, task_id=task_id, app_id=app_id))
    except TaskWaiting as waiting:
        print(waiting)
        return WAITING_EXIT
    finally:
        app.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
