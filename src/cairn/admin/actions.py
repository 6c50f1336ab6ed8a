"""What an operator may do to a task (retry, cancel), and what it says back.

Each change is one store call that checks the task's status itself, so a task
that moved meanwhile is left alone. The status is also read first, only to say
why nothing changed: the CLI prints that sentence and the dashboard shows it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from cairn.store import AdminStore
from cairn.store.records import TaskRecord


@dataclass(frozen=True, slots=True)
class Action:
    """A change of status an operator can ask for."""

    name: str  # the verb, as in "cannot retry it": "retry", "cancel"
    done: str  # past participle, for messages: "retried", "cancelled"
    sources: tuple[str, ...]
    target: str
    apply: Callable[[AdminStore, str, datetime], bool]
    # The same for every task of a batch in one source status, at once: the ids changed.
    apply_to_batch: Callable[[AdminStore, str, str, datetime], list[str]]
    # Said after a change away from a source status, e.g. what a running owner does.
    remarks: dict[str, str]

    def describe(self, task_id: str, source: str) -> str:
        """``task T: failed -> pending``, with the remark for ``source`` if any."""
        remark = self.remarks.get(source)
        return f"task {task_id}: {source} -> {self.target}" + (f" ({remark})" if remark else "")

    def allowed(self) -> str:
        """The source statuses, as a phrase: ``pending, running or waiting``."""
        if len(self.sources) == 1:
            return self.sources[0]
        return f"{', '.join(self.sources[:-1])} or {self.sources[-1]}"


RETRY = Action(
    name="retry",
    done="retried",
    sources=("failed", "cancelled"),
    target="pending",
    apply=lambda store, task_id, stamp: store.retry_task(task_id, stamp),
    apply_to_batch=lambda store, batch, source, stamp: store.retry_batch(batch, source, stamp),
    remarks={},
)
CANCEL = Action(
    name="cancel",
    done="cancelled",
    sources=("pending", "running", "waiting"),
    target="cancelled",
    apply=lambda store, task_id, stamp: store.cancel_task(task_id, stamp),
    apply_to_batch=lambda store, batch, source, stamp: store.cancel_batch(batch, source, stamp),
    remarks={"running": "its process stops at its next step boundary"},
)


@dataclass(frozen=True, slots=True)
class Applied:
    """What came of an action on one task: the task as read before (None if
    there is no such task), whether it changed, and the sentence to show.
    ``refused``: the request itself was wrong (a bad name, a task that cannot
    take it), as opposed to one that found nothing to change."""

    task: TaskRecord | None
    changed: bool
    message: str
    refused: bool = False


def apply_to_task(store: AdminStore, action: Action, task_id: str, now: datetime) -> Applied:
    """Apply ``action`` to one task, or say why nothing changed."""
    task = store.get_task(task_id)
    if task is None:
        return Applied(None, False, f"no task {task_id!r} in this store. Nothing changed.")
    if task.status not in action.sources:
        return Applied(
            task,
            False,
            f"task {task_id} is {task.status}; only {action.allowed()} tasks can be "
            f"{action.done}. Nothing changed.",
        )
    if not action.apply(store, task_id, now):
        return Applied(
            task, False, f"task {task_id} changed status just now; nothing changed. Look again."
        )
    return Applied(task, True, action.describe(task_id, task.status))
