"""What a chaos target tells the runner: each step function's run, each outside effect.

The runner sets ``$CAIRN_CHAOS_LOG`` to a file; a target that calls these
helpers appends one JSON line per event to it. Without the variable they do
nothing, so a workflow can keep the calls in production code.

- ``log_step_run(task_id, name)``: call it as the last thing a step function
  does. Runs beyond the first are *redundant executions*; a run of a step the
  store had already recorded completed is a *lost step*.
- ``log_effect(key, detail)``: call it where the outside world changes. A key
  logged twice is a *duplicate*: the chaos run fails.
- ``logged_effect(key)``: the detail logged for ``key``, or None: what a
  ``reconcile=`` function can ask, standing in for the outside system.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV = "CAIRN_CHAOS_LOG"


@dataclass(frozen=True, slots=True)
class LogLine:
    """One logged event: a step run (``task_id``, ``name``) or an effect (``key``)."""

    kind: str
    pid: int
    task_id: str = ""
    name: str = ""
    key: str = ""
    detail: Any = None


def _append(record: dict[str, Any]) -> None:
    path = os.environ.get(ENV)
    if not path:
        return
    line = json.dumps({**record, "pid": os.getpid()}) + "\n"
    # One write() on an O_APPEND descriptor: lines from many threads never
    # interleave, and a SIGKILL cannot leave half a line.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def log_step_run(task_id: str, name: str) -> None:
    """A step function of ``task_id`` called ``name`` finished its work."""
    _append({"kind": "step", "task_id": task_id, "name": name})


def log_effect(key: str, detail: Any = None) -> None:
    """The outside world changed, under ``key``; ``detail`` is what it recorded."""
    _append({"kind": "effect", "key": key, "detail": detail})


def read_log(path: Path) -> list[LogLine]:
    """Every line of a chaos log (none if the file does not exist)."""
    if not path.exists():
        return []
    return [LogLine(**json.loads(text)) for text in path.read_text().splitlines() if text.strip()]


def logged_effect(key: str) -> Any:
    """The detail of the effect logged under ``key``, or None if there is none."""
    path = os.environ.get(ENV)
    if not path:
        return None
    for line in read_log(Path(path)):
        if line.kind == "effect" and line.key == key:
            return line.detail
    return None
