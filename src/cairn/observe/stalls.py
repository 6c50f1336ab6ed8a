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
from collections.abc import Callable, Sequence
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
from cairn.observe.text import in_words, moment, task_label
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


@dataclass(frozen=True)
class Alert:
    """One message to send once: ``alert_id`` is its alert task's id (what makes
    it once); ``subject`` and ``checkpoint`` key its posts (``op_key``)."""

    alert_id: str
    kind: str
    subject: str
    checkpoint: str
    text: str
    fields: dict[str, Any]


@dataclass
class CheckResult:
    """What one check found and did."""

    stalls: list[Stall] = field(default_factory=list)
    raised: list[str] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)
    # The budget alerts posted (their alert ids, cairn.observe.budget_alerts).
    budgets: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # The failure messages sent (cairn.observe.failures): their alert ids.
    failures: list[str] = field(default_factory=list)


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


def in_flight_seconds(stall: Stall, now: datetime) -> float | None:
    """How long the stalled task has been in its step in flight, if one is noted."""
    now_in = stall.task.in_flight
    return None if now_in is None else max(0.0, (now - now_in.started_at).total_seconds())


def _stall_label(task: RunningTask) -> str:
    """The stalled task as people gave it: its key as given, its id after."""
    return task_label(task.task_id, task.item_key, task.args, task.codec)


def _stall_text(stall: Stall, checkpoint: str, stall_after: float, now: datetime) -> str:
    task = stall.task
    where = f" of batch {task.batch}" if task.batch else ""
    step = f", after step {task.last_step}" if task.last_step else ""
    flying = in_flight_seconds(stall, now)
    doing = (
        ""
        if task.in_flight is None or flying is None
        else f"; in step {task.in_flight.name} (#{task.in_flight.seq}) for {in_words(flying)}"
    )
    return (
        f"cairn: task {_stall_label(task)}{where} ({task.name}) has made no progress for "
        f"{in_words(stall.seconds)} (last checkpoint {moment(checkpoint)}{step}; threshold "
        f"{in_words(stall_after)}){doing}; owner {task.owner or '-'}"
    )


def task_link(dashboard: str | None, task_id: str) -> str | None:
    """The dashboard's page of ``task_id``, if a dashboard URL is configured."""
    if not dashboard:
        return None
    return f"{dashboard.rstrip('/')}/task?{urlencode({'id': task_id})}"


def stall_fields(
    stall: Stall, checkpoint: str, stall_after: float, dashboard: str | None, now: datetime
) -> dict[str, Any]:
    """The generic webhook's fields of a stall (docs/observability.md)."""
    task = stall.task
    flying = in_flight_seconds(stall, now)
    return {
        "task_name": task.name,
        "batch": task.batch,
        "step": task.last_step,
        "step_in_flight": None if task.in_flight is None else task.in_flight.name,
        "in_flight_seconds": None if flying is None else round(flying, 3),
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
        # More checks run at each check, on the same result (failure alerts:
        # cairn.observe.failures adds its own).
        self.extra_checks: list[Callable[[CheckResult], None]] = []
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
        now = self.app.clock.now()
        result = CheckResult(stalls=find_stalls(self.app, self.stall_after))
        stalled = {s.task.task_id: to_iso(s.task.checkpoint) for s in result.stalls}
        for stall in result.stalls:
            checkpoint = stalled[stall.task.task_id]
            text = _stall_text(stall, checkpoint, self.stall_after, now)
            fields = stall_fields(stall, checkpoint, self.stall_after, self.dashboard, now)
            title = f"Stalled: {_stall_label(stall.task)}"
            self._deliver(result, "stall", stall.task.task_id, checkpoint, text, fields, title)
        alerts = admin(self.app.store, "stall checks").open_alerts(ALERT_TASK, RAISED, CLEARED)
        for opened in alerts:
            task_id, checkpoint = opened.rsplit("/", 1)
            if stalled.get(task_id) == checkpoint:
                continue  # the same stall, still there
            self._recovered(result, task_id, checkpoint)
        self._budgets(result)
        for extra in self.extra_checks:
            extra(result)
        return result

    def _recovered(self, result: CheckResult, task_id: str, checkpoint: str) -> None:
        """Announce that ``task_id`` finished, or is moving again, after its stall."""
        record = self.app.store.get_task(task_id)
        status = record.status if record is not None else "removed"
        finished = status not in ("running", "pending", "waiting")
        label = (
            task_id
            if record is None
            else task_label(task_id, record.item_key, record.args, record.codec)
        )
        since = moment(checkpoint)
        if finished:
            text = f"cairn: task {label} finished ({status}) after a stall since {since}"
            title = f"Finished after a stall: {label}"
        else:
            text = f"cairn: task {label} is moving again after a stall since {since}"
            title = f"Moving again: {label}"
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
        alert = Alert(f"{prefix}{task_id}/{checkpoint}", kind, task_id, checkpoint, text, fields)
        sent = self.send(alert, title)
        if sent is None:
            return
        if sent:
            (result.raised if kind == "stall" else result.cleared).append(task_id)
        else:
            result.errors.append(f"{alert.alert_id}: not sent")

    def _budgets(self, result: CheckResult) -> None:
        """Post each budget alert (cairn.observe.budget_alerts) once."""
        for budget in budget_alerts(admin(self.app.store, "budget alerts")):
            alert = Alert(
                budget.alert_id,
                "budget",
                budget.scope,
                budget.checkpoint,
                budget.text,
                budget.fields,
            )
            sent = self.send(alert, budget.title)
            if sent:
                result.budgets.append(alert.alert_id)
            elif sent is False:
                result.errors.append(f"{alert.alert_id}: not sent")

    def send(self, alert: Alert, title: str) -> bool | None:
        """Send ``alert`` through every notifier, once whoever asks: True if it
        was sent now, None if it had been sent before, False if it could not be
        (logged; the next check tries again). Its alert task's id is its key."""
        record = self.app.store.get_task(alert.alert_id)
        if record is not None and record.status == "completed":
            return None  # sent before, by this watcher or an earlier one
        if record is not None and record.status == "failed":
            # The last try gave up (a webhook down): try again at this check.
            admin(self.app.store, "stall checks").retry_task(alert.alert_id, self.app.clock.now())
        try:
            self.app.run(
                self._alert,
                task_id=alert.alert_id,
                kind=alert.kind,
                subject=alert.subject,
                checkpoint=alert.checkpoint,
                text=alert.text,
                fields=alert.fields,
                title=title,
            )
        except CairnError as exc:
            log.warning("could not send %s alert for %s: %s", alert.kind, alert.subject, exc)
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
