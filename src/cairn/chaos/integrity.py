"""The store-integrity checker: what the store held, and what it must never lose.

After each kill the runner takes a ``Snapshot`` of every completed history entry
(its kind, name and a digest of its output) and every finished task. Between two
snapshots nothing recorded may vanish or change: that would be a *lost step*.
A step function that runs again after the store recorded its step completed is
lost work too, read off the chaos log. Only the ``AdminStore`` protocol is used, so
the checks run the same on every backend.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from cairn.chaos.log import LogLine
from cairn.store import AdminStore
from cairn.store.records import TaskRecord

StepId = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Entry:
    """A completed history entry, as far as integrity goes."""

    kind: str
    name: str
    digest: str


@dataclass(frozen=True, slots=True)
class Loss:
    """Something the store had recorded and then lost, or work done again."""

    task_id: str
    seq: int
    name: str
    why: str


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every completed history entry, and the result of every completed task."""

    entries: dict[StepId, Entry]
    results: dict[str, str]

    def completed_steps(self) -> set[tuple[str, str]]:
        """(task id, step name) of every completed step (kind ``step``)."""
        return {(task, e.name) for (task, _), e in self.entries.items() if e.kind == "step"}


def _digest(text: str | None) -> str:
    return hashlib.sha256((text or "").encode()).hexdigest()[:16]


def _all_tasks(store: AdminStore) -> list[TaskRecord]:
    rows = store.list_tasks()
    try:
        return list(rows)
    finally:
        close = getattr(rows, "close", None)
        if close is not None:
            close()  # the stream holds a connection of its own


def snapshot(store: AdminStore) -> Snapshot:
    """What ``store`` holds now."""
    entries: dict[StepId, Entry] = {}
    results: dict[str, str] = {}
    for task in _all_tasks(store):
        if task.status == "completed":
            results[task.id] = _digest(task.result)
        for seq, record in store.load_history(task.id).items():
            if record.status == "completed":
                entries[(task.id, seq)] = Entry(record.kind, record.name, _digest(record.output))
    return Snapshot(entries, results)


def progress_marker(store: AdminStore) -> tuple[int, int]:
    """A cheap reading that changes whenever a run records anything: tasks
    completed, and completed entries of the tasks running now."""
    completed = sum(summary.counts.get("completed", 0) for summary in store.batch_summaries())
    running = store.running_tasks(None)
    entries = sum(
        1
        for task in running
        for record in store.load_history(task.id).values()
        if record.status == "completed"
    )
    return completed, entries


def losses(before: Snapshot, after: Snapshot) -> list[Loss]:
    """What ``before`` held that ``after`` lost or changed."""
    found = []
    for (task_id, seq), entry in before.entries.items():
        now = after.entries.get((task_id, seq))
        if now is None:
            found.append(Loss(task_id, seq, entry.name, "recorded completed, then vanished"))
        elif now != entry:
            found.append(Loss(task_id, seq, entry.name, "recorded output changed"))
    for task_id, result in before.results.items():
        if task_id not in after.results:
            found.append(Loss(task_id, 0, "(task)", "task recorded completed, then not"))
        elif after.results[task_id] != result:
            found.append(Loss(task_id, 0, "(task)", "task result changed"))
    return found


def reruns(before: Snapshot, lines: Iterable[LogLine]) -> list[Loss]:
    """Step runs (from the chaos log of one run) of steps ``before`` had completed."""
    done = before.completed_steps()
    seqs = {(task, e.name): seq for (task, seq), e in before.entries.items()}
    return [
        Loss(
            line.task_id,
            seqs[(line.task_id, line.name)],
            line.name,
            "ran again after it was recorded completed",
        )
        for line in lines
        if line.kind == "step" and (line.task_id, line.name) in done
    ]
