"""The ``--json`` option and what it prints: rows as plain dicts, timestamps ISO 8601
with offset, errors parsed."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from dataclasses import asdict
from typing import Annotated, Any

import typer

from cairn.admin.batches import status_counts
from cairn.admin.views import StepView, parse_error, value_view
from cairn.store.records import BatchSummary, TaskRecord

from ._field_text import iso_time, seconds_between

JsonOption = Annotated[
    bool, typer.Option("--json", help="Print JSON instead of a table, for scripts.")
]


def batch_dict(summary: BatchSummary) -> dict[str, Any]:
    """One batch with a count for every status (zeros included)."""
    return {
        "name": summary.name,
        "task_name": summary.task_name,
        "created_at": iso_time(summary.created_at),
        "counts": status_counts(summary),
        "total": summary.total,
        "first_started_at": iso_time(summary.first_started_at),
        "last_finished_at": iso_time(summary.last_finished_at),
    }


def task_dict(task: TaskRecord) -> dict[str, Any]:
    """One task; ``attempts`` counts those since the last manual retry."""
    return {
        "id": task.id,
        "batch": task.batch,
        "item_key": task.item_key,
        "name": task.name,
        "status": task.status,
        "attempts": task.attempts - task.retry_base,
        "attempts_total": task.attempts,
        "owner": task.owner,
        "lease_expires_at": iso_time(task.lease_expires_at),
        "created_at": iso_time(task.created_at),
        "started_at": iso_time(task.started_at),
        "finished_at": iso_time(task.finished_at),
        "duration_seconds": seconds_between(task.started_at, task.finished_at),
        "error": parse_error(task.error),
        "wake_at": iso_time(task.wake_at),
        "parent_id": task.parent_id,
        "version": task.version,
        "debounce": None
        if task.debounce_key is None
        else {
            "key": task.debounce_key,
            "window_seconds": (task.debounce_ms or 0) / 1000,
            "events": task.debounce_events,
        },
        "singleton": task.singleton_key,
        "singleton_queued": task.singleton_queued,
    }


def value_for_json(text: str | None, codec: str) -> Any:
    # JSON-codec values are JSON already; anything else stays the stored text
    # (decoding a pickle would run code from the store).
    view = value_view(text, codec)
    if view is not None and view.blob is not None:
        blob = view.blob  # not fetched: it can be large; say where it is
        return {"blob": {"uri": blob.ref, "size": blob.size, "sha256": blob.sha256}}
    if view is None or view.json_text is None:
        return text
    return json.loads(view.json_text)


def task_detail_dict(task: TaskRecord) -> dict[str, Any]:
    """One task with its arguments and result."""
    detail = task_dict(task)
    detail["codec"] = task.codec
    detail["args"] = value_for_json(task.args, task.codec)
    detail["result"] = value_for_json(task.result, task.codec)
    return detail


def step_dict(step: StepView) -> dict[str, Any]:
    """One entry of a task's history (its output is left out: it can be large;
    a spawn names its child)."""
    seconds = seconds_between(step.started_at, step.finished_at)
    return {
        "seq": step.seq,
        "kind": step.kind,
        "name": step.name,
        "status": step.status,
        "attempts": step.attempts,
        "task_attempt": step.task_attempt,
        "run_attempts": step.run_attempts,
        "started_at": iso_time(step.started_at),
        "finished_at": iso_time(step.finished_at),
        "duration_ms": None if seconds is None else round(seconds * 1000),
        "retry_at": iso_time(step.retry_at),
        "error": None if step.error is None else asdict(step.error),
        "child_task_id": step.child_task_id,
        "fingerprint": step.fingerprint,
        "kept": step.kept,
    }


def print_json(value: Any) -> None:
    """Write ``value`` as indented JSON to stdout."""
    sys.stdout.write(json.dumps(value, indent=2) + "\n")


def stream_json_list(items: Iterable[dict[str, Any]]) -> int:
    """Write a JSON list one item per line as items arrive; returns how many."""
    out = sys.stdout
    count = 0
    out.write("[")
    for item in items:
        out.write(("," if count else "") + "\n  " + json.dumps(item))
        count += 1
    out.write("\n]\n" if count else "]\n")
    return count
