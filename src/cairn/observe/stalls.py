"""Stall detection: alert once per stall, and once when it clears.

A running task is *stalled* when its last checkpoint (the latest of: a step of
it finishing, it being claimed or taken over, a task attempt starting) is older
than ``stall_after``. A stall is identified by (task, checkpoint): the same
stall seen again is the same alert; progress followed by a new stall is a new one.

Each alert is a small cairn task with a deterministic id,
``stall/{task_id}/{checkpoint}``, whose notifiers post through ``ctx.once``:
running it again (the next check, or a watcher restarted after SIGKILL) returns
its recorded result instead of posting again. Recovery works the same way with
``recovered/{task_id}/{checkpoint}``; the alerts still open are read back from
the store, so a recovery is announced even if the watcher was down meanwhile.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from cairn.clock import to_iso
from cairn.context import Context
from cairn.errors import CairnError
from cairn.keys import op_key
from cairn.observe.budget_alerts import budget_alerts
from cairn.observe.notifiers import Message, Notifier
from cairn.observe.text import in_words, moment
from cairn.store.admin import AdminStore, admin
from cairn.store.reports import RunningTask

if TYPE_CHECKING:
    from cairn.app import Cairn
    from cairn.task import TaskDef

log = logging.getLogger("cairn.observe")

ALERT_TASK = "cairn.observe.alert"
RAISED = "stall/"
CLEARED = "recovered/"
DEFAULT_STALL_AFTER = 15 * 60.0


@dataclass(frozen=True)
class Stall:
    """A running task with no checkpoint for ``seconds``."""

    task: RunningTask
    seconds: float


@dataclass
class CheckResult:
    """What one check found and did."""

    stalls: list[Stall] = field(default_factory=list)
    raised: list[str] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)
    # The budget alerts posted (their alert ids, cairn.observe.budget_alerts).
    budgets: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def find_stalls(app: Cairn, stall_after: float) -> list[Stall]:
    """Running tasks whose last checkpoint is older than ``stall_after`` seconds."""
    return stalls_in(admin(app.store, "stall checks"), app.clock.now(), stall_after)


def stalls_in(store: AdminStore, now: datetime, stall_after: float) -> list[Stall]:
    """The stall rule, written once (the alert task and the dashboard): a running
    task whose last checkpoint is more than ``stall_after`` seconds before ``now``."""
    found = []
    for task in store.running_checkpoints():
        idle = (now - task.checkpoint).total_seconds()
        if idle > stall_after:
            found.append(Stall(task, idle))
    return found


def _stall_text(stall: Stall, checkpoint: str, stall_after: float) -> str:
    task = stall.task
    where = f" of batch {task.batch}" if task.batch else ""
    step = f", after step {task.last_step}" if task.last_step else ""
    return (
        f"cairn: task {task.task_id}{where} ({task.name}) has made no progress for "
        f"{in_words(stall.seconds)} (last checkpoint {moment(checkpoint)}{step}; threshold "
        f"{in_words(stall_after)}); owner {task.owner or '-'}"
    )


def task_link(dashboard: str | None, task_id: str) -> str | None:
    """The dashboard's page of ``task_id``, if a dashboard URL is configured."""
    if not dashboard:
        return None
    return f"{dashboard.rstrip('/')}/task?{urlencode({'id': task_id})}"


def stall_fields(
    stall: Stall, checkpoint: str, stall_after: float, dashboard: str | None
) -> dict[str, Any]:
    """The generic webhook's fields of a stall (docs/observability.md)."""
    task = stall.task
    return {
        "task_name": task.name,
        "batch": task.batch,
        "step": task.last_step,
        "stalled_for_seconds": round(stall.seconds, 3),
        "stall_after_seconds": stall_after,
        "owner": task.owner,
        "dashboard_url": task_link(dashboard, task.task_id),
    }


class StallWatcher:
    """Checks for stalls and sends alerts through ``notifiers`` (on ``app``'s store)."""

    def __init__(
        self,
        app: Cairn,
        notifiers: Sequence[Notifier],
        *,
        stall_after: float = DEFAULT_STALL_AFTER,
        dashboard: str | None = None,
    ) -> None:
        self.app = app
        self.notifiers = list(notifiers)
        self.stall_after = stall_after
        self.dashboard = dashboard
        self._alert: TaskDef[..., None] = app.task(name=ALERT_TASK)(self._send)
        self._stop = threading.Event()

    def _send(
        self,
        ctx: Context,
        kind: str,
        subject: str,
        checkpoint: str,
        text: str,
        fields: dict[str, Any] | None = None,
        title: str = "cairn",
    ) -> None:
        # subject, not task_id: app.run takes task_id= for the alert task itself.
        message = Message(
            kind, text, {"task_id": subject, "checkpoint": checkpoint, **(fields or {})}, title
        )
        for notifier in self.notifiers:
            notifier.send(ctx, op_key(kind, subject, checkpoint, notifier.name), message)

    # -- one check ----------------------------------------------------------------
    def check(self) -> CheckResult:
        """Raise an alert for every new stall, clear those that moved on, and post
        every budget alert not posted yet."""
        result = CheckResult(stalls=find_stalls(self.app, self.stall_after))
        stalled = {s.task.task_id: to_iso(s.task.checkpoint) for s in result.stalls}
        for stall in result.stalls:
            checkpoint = stalled[stall.task.task_id]
            text = _stall_text(stall, checkpoint, self.stall_after)
            fields = stall_fields(stall, checkpoint, self.stall_after, self.dashboard)
            title = f"Stalled: {stall.task.task_id}"
            self._deliver(result, "stall", stall.task.task_id, checkpoint, text, fields, title)
        alerts = admin(self.app.store, "stall checks").open_alerts(ALERT_TASK, RAISED, CLEARED)
        for opened in alerts:
            task_id, checkpoint = opened.rsplit("/", 1)
            if stalled.get(task_id) == checkpoint:
                continue  # the same stall, still there
            self._recovered(result, task_id, checkpoint)
        self._budgets(result)
        return result

    def _recovered(self, result: CheckResult, task_id: str, checkpoint: str) -> None:
        """Announce that ``task_id`` finished, or is moving again, after its stall."""
        record = self.app.store.get_task(task_id)
        status = record.status if record is not None else "removed"
        finished = status not in ("running", "pending", "waiting")
        if finished:
            text = (
                f"cairn: task {task_id} finished ({status}) after a stall since "
                f"{moment(checkpoint)}"
            )
            title = f"Finished after a stall: {task_id}"
        else:
            text = f"cairn: task {task_id} is moving again after a stall since {moment(checkpoint)}"
            title = f"Moving again: {task_id}"
        fields = {
            "task_name": record.name if record is not None else None,
            "batch": record.batch if record is not None else None,
            "status": status,
            "finished": finished,
            "dashboard_url": task_link(self.dashboard, task_id),
        }
        self._deliver(result, "recovered", task_id, checkpoint, text, fields, title)

    def _deliver(
        self,
        result: CheckResult,
        kind: str,
        task_id: str,
        checkpoint: str,
        text: str,
        fields: dict[str, Any],
        title: str,
    ) -> None:
        prefix = RAISED if kind == "stall" else CLEARED
        alert_id = f"{prefix}{task_id}/{checkpoint}"
        sent = self._send_once(result, alert_id, kind, task_id, checkpoint, text, fields, title)
        if sent:
            (result.raised if kind == "stall" else result.cleared).append(task_id)

    def _budgets(self, result: CheckResult) -> None:
        """Post each budget alert (cairn.observe.budget_alerts) once."""
        for alert in budget_alerts(admin(self.app.store, "budget alerts")):
            budget = (alert.scope, alert.checkpoint, alert.text, alert.fields, alert.title)
            if self._send_once(result, alert.alert_id, "budget", *budget):
                result.budgets.append(alert.alert_id)

    def _send_once(
        self,
        result: CheckResult,
        alert_id: str,
        kind: str,
        task_id: str,
        checkpoint: str,
        text: str,
        fields: dict[str, Any],
        title: str,
    ) -> bool:
        """Run alert task ``alert_id`` (which posts the message once); True if it
        was sent now, False if it had been or could not be (in ``result.errors``)."""
        record = self.app.store.get_task(alert_id)
        if record is not None and record.status == "completed":
            return False  # sent before, by this watcher or an earlier one
        if record is not None and record.status == "failed":
            # The last try gave up (a webhook down): try again at this check.
            admin(self.app.store, "stall checks").retry_task(alert_id, self.app.clock.now())
        try:
            self.app.run(
                self._alert,
                task_id=alert_id,
                kind=kind,
                subject=task_id,
                checkpoint=checkpoint,
                text=text,
                fields=fields,
                title=title,
            )
        except CairnError as exc:
            log.warning("could not send %s alert for %s: %s", kind, task_id, exc)
            result.errors.append(f"{alert_id}: {exc}")
            return False
        return True

    # -- the loop -----------------------------------------------------------------
    def run_forever(self, interval: float) -> None:
        """Check every ``interval`` seconds until ``stop()``."""
        while not self._stop.is_set():
            try:
                self.check()
            except CairnError as exc:
                log.warning("stall check failed: %s", exc)
            self._stop.wait(interval)

    def stop(self) -> None:
        self._stop.set()
