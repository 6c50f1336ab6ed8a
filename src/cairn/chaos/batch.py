"""The built-in chaos batch: many small tasks, each with every kind of entry.

Each task records a uuid, runs five quick steps that chain their outputs, and
applies its result once through ``ctx.once`` with a reconcile. Step functions
and the apply report to the chaos log (``cairn.chaos.log``), so the runner can
count redundant executions and duplicate effects. Outputs derive from the
recorded uuid, so a replay that lost its inputs shows up as changed outputs.

``$CAIRN_CHAOS_TASKS`` sets the number of tasks (default 20) and
``$CAIRN_CHAOS_WORK_MS`` the work each step simulates (default 5 ms).
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any

from cairn import BatchReport, Cairn, Context, TaskDef, op_key
from cairn.chaos.log import log_effect, log_step_run, logged_effect

BATCH = "chaos"
STEPS = ("fetch", "analyze", "propose", "validate")
TASKS_ENV = "CAIRN_CHAOS_TASKS"
WORK_ENV = "CAIRN_CHAOS_WORK_MS"
DEFAULT_TASKS = 20
CONCURRENCY = 4


def _work_seconds() -> float:
    return float(os.environ.get(WORK_ENV, "5")) / 1000


def _step(task_id: str, name: str, value: str) -> str:
    time.sleep(_work_seconds())  # the simulated work a kill can land in
    output = hashlib.sha256(f"{name}:{value}".encode()).hexdigest()[:16]
    log_step_run(task_id, name)  # last: the work is done
    return output


def _apply(key: str, value: str) -> dict[str, Any]:
    log_effect(key, value)
    return {"key": key, "value": value}


def _reconcile(key: str) -> dict[str, Any] | None:
    value = logged_effect(key)
    return None if value is None else {"key": key, "value": value}


def build_app(store_url: str) -> tuple[Cairn, TaskDef[..., dict[str, Any]]]:
    """An app on ``store_url`` with the chaos task registered."""
    app = Cairn(store_url)

    @app.task(name="chaos_item")
    def chaos_item(ctx: Context, item: int) -> dict[str, Any]:
        value = str(ctx.uuid())
        for name in STEPS:
            value = ctx.step(name, _step, ctx.task_id, name, value)
        key = op_key(BATCH, str(item), "apply")
        receipt = ctx.once(key, _apply, value, reconcile=_reconcile)
        confirmed = ctx.step("confirm", _step, ctx.task_id, "confirm", receipt["value"])
        return {"item": item, "value": confirmed}

    return app, chaos_item


def run(store_url: str) -> BatchReport:
    """Run (or resume) the built-in batch to its end: the default chaos target."""
    tasks = int(os.environ.get(TASKS_ENV, str(DEFAULT_TASKS)))
    app, task = build_app(store_url)
    with app:
        return app.run_batch(
            BATCH,
            task,
            [{"item": number} for number in range(tasks)],
            concurrency=CONCURRENCY,
            progress=False,
        )
