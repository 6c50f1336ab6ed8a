"""A task rolled out with ``ctx.patched`` while copies of it are in flight.

The patch acceptance test runs this file as a program, several times on one
SQLite store, SIGKILLing it at chosen points::

    python patch_script.py --store PATH --marks PATH --code old|new
        --task ID [--task ID ...] [--kill-before STEP]

Task ``review`` fetches a page, parses it, and reports. The old code parses
with step ``parse``; the new code asks ``ctx.patched("stricter-parser")`` first
and parses with step ``parse-v2`` when it says True. Every real run of a step
function, and every answer of ``ctx.patched``, appends one line to the marks
file (``TASK step NAME`` or ``TASK patched True``), which the test reads.

``--kill-before STEP`` makes the run SIGKILL itself just before step STEP of
the first task it runs. Prints the results as JSON and exits 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path

from cairn import Cairn, Context
from cairn.testing import set_fault_hook

PATCH = "stricter-parser"


def build(store: Path, marks: Path, code: str) -> Cairn:
    """The app, with the old or the new code of task ``review``."""
    app = Cairn(f"sqlite:///{store}")

    def mark(line: str) -> None:
        with marks.open("a", encoding="utf-8") as out:
            out.write(line + "\n")
            out.flush()
            os.fsync(out.fileno())

    def fetch(task_id: str) -> str:
        mark(f"{task_id} step fetch")
        return f"page of {task_id}"

    def parse(task_id: str, page: str) -> str:
        mark(f"{task_id} step parse")
        return f"lenient: {page}"

    def parse_v2(task_id: str, page: str) -> str:
        mark(f"{task_id} step parse-v2")
        return f"strict: {page}"

    def report(task_id: str, verdict: str) -> str:
        mark(f"{task_id} step report")
        return verdict

    @app.task(name="review")
    def review(ctx: Context, n: int) -> str:
        page = ctx.step("fetch", fetch, ctx.task_id)
        fixed = False
        if code == "new":
            fixed = ctx.patched(PATCH)
            mark(f"{ctx.task_id} patched {fixed}")
        if fixed:
            verdict = ctx.step("parse-v2", parse_v2, ctx.task_id, page)
        else:
            verdict = ctx.step("parse", parse, ctx.task_id, page)
        return str(ctx.step("report", report, ctx.task_id, verdict))

    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--marks", type=Path, required=True)
    parser.add_argument("--code", choices=("old", "new"), required=True)
    parser.add_argument("--task", action="append", required=True)
    parser.add_argument("--kill-before")
    options = parser.parse_args()
    app = build(options.store, options.marks, options.code)
    if options.kill_before is not None:

        def kill(point: str, task_id: str, seq: int, name: str) -> None:
            if point == "before_step" and name == options.kill_before:
                os.kill(os.getpid(), signal.SIGKILL)

        set_fault_hook(app, kill)
    results = {}
    with app:
        for task_id in options.task:
            n = int(task_id.rpartition("-")[2])
            results[task_id] = app.run(app.registered("review"), task_id=task_id, n=n)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
