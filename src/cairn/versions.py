"""Deploying new code while tasks are in flight: ``cairn check`` and ``cairn versions``.

``check_app`` replays every unfinished task's history against the app's
current code (``cairn.engine.check``: nothing is called for a recorded
position, nothing is written) and prices what a re-run from the first change
would repeat: the model calls recorded at or after it, from their recorded
usage and cost. ``versions_report`` counts unfinished tasks by the version they
started on (or, not started yet, were enqueued under), and says which of them no live worker claims.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from cairn.agent.costs import CostLine, line_of
from cairn.app import Cairn
from cairn.engine.check import DryReplay, dry_replay
from cairn.store.admin import admin
from cairn.store.protocol import Store
from cairn.store.records import RecordedCall, TaskRecord

UNFINISHED = ("pending", "running", "waiting")


@dataclass(frozen=True, slots=True)
class TaskCheck:
    """One task's dry replay, and what re-running from its first change repeats."""

    replay: DryReplay
    repeated: CostLine

    @property
    def ok(self) -> bool:
        return self.replay.verdict == "compatible"

    def to_json(self) -> dict[str, Any]:
        replay = self.replay
        found: dict[str, Any] = {
            "task": replay.task.id,
            "batch": replay.task.batch,
            "version": replay.task.version,
            "verdict": replay.verdict,
            "position": replay.seq,
            "entry": replay.label,
            "recorded": replay.recorded,
            "current": replay.current,
            "what": replay.what,
            "unfingerprinted_entries": replay.unprinted,
        }
        if not self.ok:
            found["rerun_repeats"] = {
                "calls": self.repeated.calls,
                "input_tokens": self.repeated.usage.input_tokens,
                "output_tokens": self.repeated.usage.output_tokens,
                "estimated_cost": round(self.repeated.cost, 6),
            }
        return found


def unfinished_tasks(store: Store, batch: str | None) -> Iterable[TaskRecord]:
    """The store's tasks still to finish (of one batch, or all), by status."""
    tools = admin(store, "cairn check")
    for status in UNFINISHED:
        yield from tools.list_tasks(batch=batch, status=status)


def check_app(app: Cairn, batch: str | None = None) -> list[TaskCheck]:
    """A dry replay of every unfinished task of ``app`` registered here."""
    engine = app.engine()
    checks = []
    for record in unfinished_tasks(app.store, batch):
        if record.name not in engine.tasks:
            continue  # another app's task: its own check covers it
        replay = dry_replay(engine, record)
        checks.append(TaskCheck(replay, _repeated(replay, record)))
    return checks


def _repeated(replay: DryReplay, record: TaskRecord) -> CostLine:
    """The recorded model calls at or after the first change: what a re-run
    from there would pay for again."""
    line = CostLine(record.id)
    if replay.verdict == "compatible" or replay.seq is None:
        return line
    for seq, entry in sorted(replay.history.items()):
        if seq >= replay.seq and entry.kind in ("llm", "conv"):
            call = RecordedCall(
                record.id, record.batch, record.codec, seq, entry.kind, entry.name, entry.output
            )
            line.add(line_of(call, None))
    return line


# -- versions ---------------------------------------------------------------------------
ANY_VERSION = "*"


def _claims(claims: list[str], version: str | None) -> bool:
    """Whether a worker claiming ``claims`` takes a task of ``version`` (a task
    of no version is taken by every worker)."""
    return version is None or ANY_VERSION in claims or version in claims


@dataclass(frozen=True, slots=True)
class VersionLine:
    """Unfinished tasks of one version, and whether a worker takes them."""

    version: str | None
    counts: dict[str, int]
    workers: int

    @property
    def unroutable(self) -> bool:
        return self.workers == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "counts": self.counts,
            "tasks": sum(self.counts.values()),
            "workers": self.workers,
            "unroutable": self.unroutable,
        }


def live_workers(store: Store, now: datetime, within: timedelta) -> dict[str, list[str]]:
    """Each worker seen within ``within`` of ``now``, with the versions it claims."""
    seen = admin(store, "cairn versions").workers_seen(now - within)
    return {owner: json.loads(versions) for owner, versions in seen}


def versions_report(store: Store, now: datetime, within: timedelta) -> list[VersionLine]:
    """Unfinished tasks by version, with how many live workers claim each."""
    workers = live_workers(store, now, within)
    counts: dict[str | None, dict[str, int]] = {}
    for record in unfinished_tasks(store, None):
        by_status = counts.setdefault(record.version, {})
        by_status[record.status] = by_status.get(record.status, 0) + 1
    lines = []
    for version in sorted(counts, key=lambda v: (v is None, v or "")):
        takers = sum(1 for claims in workers.values() if _claims(claims, version))
        lines.append(VersionLine(version, counts[version], takers))
    return lines
