"""The program behind crash testing's processes, and one run of a crash case.

``python -m cairn.testing._case_runner`` is the zygote of ``_zygote`` (one
forked child per request; ``--preload a,b`` imports those modules first);
``--once REQUEST_FILE`` runs one request in a fresh interpreter instead.
Nothing imports this module, so ``python -m`` runs it cleanly.

``run_case(spec)`` is what a crash test's child runs: load the user's task,
log every boundary it passes to ``spec["events"]`` (one JSON line each), crash
with ``os._exit(137)`` at ``spec["fault"]`` if given, and write how the task
ended (and the outside effects, if asked) to ``spec["result"]``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from cairn.app import Cairn
from cairn.codec import codec_for
from cairn.errors import ConfigurationError, TaskFailed
from cairn.task import TaskDef
from cairn.testing._targets import load, load_task
from cairn.testing._zygote import run_once, serve
from cairn.testing.faults import Fault, FaultPlan


class BoundaryLog:
    """A fault hook that appends each boundary to a file, then asks the plan."""

    def __init__(self, path: Path, plan: FaultPlan) -> None:
        self._path = path
        self._plan = plan

    def __call__(self, point: str, task_id: str, seq: int, name: str) -> None:
        line = json.dumps({"point": point, "task_id": task_id, "seq": seq, "name": name})
        # One write() on an O_APPEND descriptor: whole lines, even if killed right after.
        fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
        self._plan(point, task_id, seq, name)


def _plan(fault: dict[str, Any] | None) -> FaultPlan:
    if fault is None:
        return FaultPlan()
    name = fault["name"]
    is_op = fault["point"] in ("after_claim", "after_act", "after_record")
    return FaultPlan(
        [
            Fault(
                point=fault["point"],
                step=None if is_op else name,
                key=name if is_op else None,
                seq=fault["seq"],
                skip=fault["occurrence"] - 1,
                action="exit",
            )
        ]
    )


def _check_store(app: Cairn, url: str) -> None:
    if app.store_url != url:
        raise ConfigurationError(
            f"the app opens the store {app.store_url!r}, not the one this crash case gave it "
            f"in $CAIRN_STORE ({url!r}). Create the app as Cairn() with no store argument, so "
            "it reads CAIRN_STORE, or set the store from os.environ['CAIRN_STORE']."
        )


def _run_task(app: Cairn, task: TaskDef[..., Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    try:
        with app:
            result = app.run(task, **kwargs)
    except TaskFailed as exc:
        error = {"type": exc.error.get("type", "?"), "message": exc.error.get("message", "")}
        return {"status": "failed", "error": error}
    except Exception as exc:  # noqa: BLE001 - any way the run ends is the case's outcome
        kind = type(exc)
        error = {"type": f"{kind.__module__}.{kind.__qualname__}", "message": str(exc)}
        return {"status": "failed", "error": error}
    return {"status": "completed", "result": app.codec.encode(result)}


def run_case(spec: dict[str, Any]) -> None:
    """One run of a crash case (see the module docstring)."""
    app, task = load_task(spec["target"], spec.get("app"))
    _check_store(app, spec["store_url"])
    app.fault_hook = BoundaryLog(Path(spec["events"]), _plan(spec.get("fault")))
    kwargs = codec_for("json").decode(spec["kwargs"])
    outcome = _run_task(app, task, kwargs)
    if spec.get("effects"):
        outcome["effects"] = load(spec["effects"])()
    Path(spec["result"]).write_text(json.dumps(outcome))


def main(argv: list[str]) -> None:
    if argv[:1] == ["--once"]:
        raise SystemExit(run_once(argv[1]))
    if argv[:1] == ["--preload"]:
        serve([name for name in argv[1].split(",") if name])
        return
    serve()


if __name__ == "__main__":
    main(sys.argv[1:])
