"""Failure alerts: a task that failed for good, and a batch that ended with
failures, each announced once, whoever watches and however often it restarts.

At each check (``cairn watch``, beside the stall check) the tasks that failed
for good in the last ``lookback`` are read, oldest first, and each failure, a
(task, the moment it failed) pair, is announced by exactly one message:

* its batch has ended (nothing of it pending, running or waiting): the batch's
  message, ``batch-failed/{batch}/{its last finish}``, with the batch's counts
  by status and its failures by error type, covers the failures not announced
  yet; it is sent for a batch that ends with failures even when every failure
  was announced before;
* more than ``digest_at`` new failures of one batch in one check: one digest,
  ``failures/{batch}/{first failure}``, with their counts by error type and the
  first few (no flood: one message per batch per check);
* otherwise one message per task, ``failed/{task}/{when it failed}``: its step,
  its error's type and first line, a link.

As a stall alert, each is a cairn task with that deterministic id whose
notifiers post through ``ctx.once`` (``StallWatcher.send``). A digest or a
batch's message records, in its arguments, the failures it covers, so a
restarted watcher reads which failures are announced from the store; a message
whose task exists but did not complete (killed mid-post, a webhook down) is
sent again from its recorded arguments, and ``ctx.once`` posts it once.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from cairn.clock import to_iso
from cairn.observe.stalls import ALERT_TASK, Alert, CheckResult, StallWatcher, task_link
from cairn.observe.text import first_line, recorded_error, short_type, task_label
from cairn.store.admin import AdminStore, admin
from cairn.store.records import FINISHED_STATUSES, BatchSummary, TaskRecord
from cairn.store.reports import TaskQuery

FAILED = "failed/"
DIGEST = "failures/"
BATCH_FAILED = "batch-failed/"
DEFAULT_LOOKBACK = 24 * 3600.0
# More new failures of one batch than this in one check are one digest.
DEFAULT_DIGEST_AT = 5
# Failures read per check, and the most one digest covers (the rest: next check).
MOST = 1000
# A digest or a batch's message names this many of its failures in its text.
EXAMPLES = 3
UNKNOWN = "unknown"


def failure_key(task: TaskRecord) -> str:
    """One failure: the task, and the moment it failed (a task retried that fails
    again is a new failure)."""
    return f"{task.id}/{to_iso(task.finished_at) if task.finished_at else '-'}"


def _label(task: TaskRecord) -> str:
    """The task as people gave it: its key as given, its id after."""
    return task_label(task.id, task.item_key, task.args, task.codec)


def _error(task: TaskRecord) -> tuple[str, str]:
    found = recorded_error(task.error)
    return (UNKNOWN, "") if found is None else (found[0], first_line(found[1]))


def _by_type(counts: Iterable[tuple[str, int]]) -> str:
    return ", ".join(f"{short_type(kind)} {n}" for kind, n in counts)


class FailureWatcher:
    """Announces failures through a ``StallWatcher``'s notifiers, at each of its checks."""

    def __init__(
        self,
        watcher: StallWatcher,
        *,
        lookback: float = DEFAULT_LOOKBACK,
        digest_at: int = DEFAULT_DIGEST_AT,
    ) -> None:
        self.watcher = watcher
        self.app = watcher.app
        self.lookback = lookback
        self.digest_at = digest_at
        watcher.extra_checks.append(self.check)

    def _store(self) -> AdminStore:
        return admin(self.app.store, "failure alerts")

    # -- one check ----------------------------------------------------------------
    def check(self, result: CheckResult) -> None:
        """Announce every failure not announced yet, and every batch that ended
        with failures since its last message."""
        store = self._store()
        since = self.app.clock.now() - timedelta(seconds=self.lookback)
        failed = store.failed_since(since, MOST)
        covered = self._covered(store, result, since, failed)
        new: dict[str | None, list[TaskRecord]] = {}
        for task in failed:
            if failure_key(task) not in covered:
                new.setdefault(task.batch, []).append(task)
        ended = self._ended(store, {t.batch for t in failed if t.batch is not None})
        for batch, tasks in new.items():
            if batch is not None and batch in ended:
                continue  # the batch's own message covers them
            if batch is not None and len(tasks) > self.digest_at:
                self._send(result, self._digest(batch, tasks))
            else:
                for task in tasks:
                    self._send(result, self._one(store, task))
        for batch, summary in ended.items():
            self._send(result, self._batch_failed(store, summary, new.get(batch, [])))

    def _covered(
        self, store: AdminStore, result: CheckResult, since: datetime, failed: list[TaskRecord]
    ) -> set[str]:
        """The failures already announced (their message sent, or under way: one
        not completed is sent again here, from its recorded arguments)."""
        covered: set[str] = set()
        ids = {FAILED + failure_key(t): failure_key(t) for t in failed}
        present: set[str] = set()
        listed = list(ids)
        for start in range(0, len(listed), 500):
            present |= store.tasks_present(listed[start : start + 500])
        covered |= {ids[alert_id] for alert_id in present}
        query = TaskQuery(name=ALERT_TASK, since=since, include_internal=True)
        for alert in store.list_tasks(query=query):
            grouped = alert.id.startswith((DIGEST, BATCH_FAILED))
            if not (grouped or alert.id in present):
                continue
            args = _arguments(alert)
            if grouped:
                covered |= set(args.get("fields", {}).get("failures", []))
            if alert.status != "completed" and args:
                self._send(result, _recorded(alert.id, args))
        return covered

    def _ended(self, store: AdminStore, batches: set[str]) -> dict[str, BatchSummary]:
        """Those of ``batches`` with nothing left to run and a failure among them."""
        ended = {}
        for batch in sorted(batches):
            for summary in store.batch_summaries(batch):
                left = sum(n for s, n in summary.counts.items() if s not in FINISHED_STATUSES)
                if not left and summary.counts.get("failed", 0) and summary.last_finished_at:
                    ended[batch] = summary
        return ended

    def _send(self, result: CheckResult, alert: Alert) -> None:
        sent = self.watcher.send(alert, str(alert.fields.get("title") or "cairn"))
        if sent:
            result.failures.append(alert.alert_id)
        elif sent is False:
            result.errors.append(f"{alert.alert_id}: not sent")

    # -- the messages ---------------------------------------------------------------
    def _one(self, store: AdminStore, task: TaskRecord) -> Alert:
        kind, line = _error(task)
        step = store.failed_steps([task.id]).get(task.id)
        where = f" of batch {task.batch}" if task.batch else ""
        in_step = f" in step {step}" if step else ""
        text = (
            f"cairn: task {_label(task)}{where} ({task.name}) failed for good{in_step} after "
            f"{task.attempts - task.retry_base} attempt(s): {short_type(kind)}: {line}"
        )
        fields = {
            "title": f"Failed: {_label(task)}",
            "task_name": task.name,
            "batch": task.batch,
            "step": step,
            "error_type": kind,
            "error": line,
            "attempts": task.attempts - task.retry_base,
            "dashboard_url": task_link(self.watcher.dashboard, task.id),
        }
        key = failure_key(task)
        return Alert(FAILED + key, "failed", task.id, key.rsplit("/", 1)[1], text, fields)

    def _digest(self, batch: str, tasks: list[TaskRecord]) -> Alert:
        tasks = tasks[:MOST]
        counts = Counter(_error(t)[0] for t in tasks).most_common()
        first = tasks[0].finished_at
        moment = to_iso(first) if first else "-"
        examples = "; ".join(f"{_label(t)}: {_error(t)[1]}" for t in tasks[:EXAMPLES])
        text = (
            f"cairn: {len(tasks)} tasks of batch {batch} failed for good since {moment}: "
            f"{_by_type(counts)}; e.g. {examples}"
        )
        fields = {
            "title": f"{len(tasks)} failed in {batch}",
            "task_id": None,
            "batch": batch,
            "count": len(tasks),
            "by_error_type": dict(counts),
            "failures": [failure_key(t) for t in tasks],
            "dashboard_url": _failed_link(self.watcher.dashboard, batch),
        }
        return Alert(f"{DIGEST}{batch}/{moment}", "failures", batch, moment, text, fields)

    def _batch_failed(
        self, store: AdminStore, summary: BatchSummary, new: list[TaskRecord]
    ) -> Alert:
        batch = summary.name
        groups = store.error_groups(TaskQuery(batch=batch), 20)
        ended = to_iso(summary.last_finished_at) if summary.last_finished_at else "-"
        states = ", ".join(f"{n} {s}" for s, n in sorted(summary.counts.items()) if n)
        examples = "; ".join(f"{_label(t)}: {_error(t)[1]}" for t in new[:EXAMPLES])
        text = (
            f"cairn: batch {batch} ended with failures: {summary.total} tasks ({states}); "
            f"failed by error type: {_by_type(groups)}" + (f"; e.g. {examples}" if examples else "")
        )
        fields = {
            "title": f"Batch {batch} ended with failures",
            "task_id": None,
            "batch": batch,
            "counts": dict(summary.counts),
            "by_error_type": dict(groups),
            "failures": [failure_key(t) for t in new[:MOST]],
            "dashboard_url": _failed_link(self.watcher.dashboard, batch),
        }
        return Alert(f"{BATCH_FAILED}{batch}/{ended}", "batch_failed", batch, ended, text, fields)


def _failed_link(dashboard: str | None, batch: str) -> str | None:
    """The dashboard's list of the batch's failed tasks (grouped by error type)."""
    if not dashboard:
        return None
    return f"{dashboard.rstrip('/')}/tasks?{urlencode({'batch': batch, 'status': 'failed'})}"


def _arguments(alert: TaskRecord) -> dict[str, Any]:
    """The arguments an alert task was made with (JSON), or {} if unreadable."""
    try:
        value = json.loads(alert.args)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _recorded(alert_id: str, args: dict[str, Any]) -> Alert:
    """The alert an alert task's recorded arguments describe."""
    fields = args.get("fields")
    return Alert(
        alert_id,
        str(args.get("kind", "")),
        str(args.get("subject", "")),
        str(args.get("checkpoint", "")),
        str(args.get("text", "")),
        fields if isinstance(fields, dict) else {},
    )
