"""What an operator may do to a task (retry, cancel), and what it says back.

Each change is one store call that checks the task's status itself, so a task
that moved meanwhile is left alone. The status is also read first, only to say
why nothing changed: the CLI prints that sentence and the dashboard shows it.
A cancel reaches the task's spawned children (and theirs) in the same
transaction, unless asked to keep them. Every action is written to the audit
trail (``cairn.admin.audit``) with who made it and how many tasks it changed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from cairn.admin.audit import Actor, audit
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
    take it), as opposed to one that found nothing to change. ``children``:
    the tasks below it a cancel reached too."""

    task: TaskRecord | None
    changed: bool
    message: str
    refused: bool = False
    children: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        """How many tasks changed."""
        return (1 if self.changed else 0) + len(self.children)


def _change(
    store: AdminStore, action: Action, task_id: str, now: datetime, keep_children: bool
) -> Applied:
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
    children: list[str] = []
    if action is CANCEL and not keep_children:
        cancelled = store.cancel_family(task_id, now)
        changed, children = bool(cancelled), cancelled[1:]
    else:
        changed = action.apply(store, task_id, now)
    if not changed:
        return Applied(
            task, False, f"task {task_id} changed status just now; nothing changed. Look again."
        )
    message = action.describe(task_id, task.status)
    if children:
        message += f"; {len(children)} of its spawned tasks cancelled with it"
    return Applied(task, True, message, children=children)


def apply_to_task(
    store: AdminStore,
    action: Action,
    task_id: str,
    now: datetime,
    *,
    actor: Actor | None = None,
    keep_children: bool = False,
) -> Applied:
    """Apply ``action`` to one task, or say why nothing changed; a cancel also
    cancels the unfinished tasks it spawned (and theirs), unless
    ``keep_children``. Written to the audit trail as ``actor``."""
    detail = {"keep_children": True} if action is CANCEL and keep_children else None
    with audit(store, actor, action.name, f"task {task_id}", now, detail) as entry:
        applied = _change(store, action, task_id, now, keep_children)
        entry.done(applied.count, applied.message)
    return applied


@dataclass(frozen=True, slots=True)
class BatchApplied:
    """What an action on a batch's tasks changed: the ids, per source status
    (each task once), in enqueue order."""

    batch: str
    action: Action
    changed: dict[str, list[str]]

    @property
    def count(self) -> int:
        return sum(len(ids) for ids in self.changed.values())

    def summary(self) -> str:
        """``batch B: 3 task(s) -> pending (2 failed, 1 cancelled)``, or that none changed."""
        if not self.count:
            sources = " or ".join(self.changed)
            return f"batch {self.batch}: no {sources} tasks; nothing changed"
        parts = ", ".join(f"{len(ids)} {source}" for source, ids in self.changed.items() if ids)
        return f"batch {self.batch}: {self.count} task(s) -> {self.action.target} ({parts})"


def apply_to_batch(
    store: AdminStore,
    action: Action,
    batch: str,
    sources: tuple[str, ...],
    now: datetime,
    *,
    actor: Actor | None = None,
) -> BatchApplied:
    """Apply ``action`` to every task of ``batch`` in one of ``sources``: one
    statement per source status, however many tasks the batch has. (The
    batch's spawned children are in the batch, so a cancel reaches them.)"""
    target = f"batch {batch} ({' or '.join(sources)})"
    changed: dict[str, list[str]] = {}
    with audit(store, actor, action.name, target, now) as entry:
        seen: set[str] = set()
        for source in sources:
            # Each task once: a change run again after its answer was lost finds
            # every task moved at this stamp, an earlier status's among them.
            moved = [t for t in action.apply_to_batch(store, batch, source, now) if t not in seen]
            seen.update(moved)
            changed[source] = moved
        applied = BatchApplied(batch, action, changed)
        entry.done(applied.count, applied.summary())
    return applied


def unfinished_below(store: AdminStore, task_id: str) -> list[str]:
    """The unfinished tasks a cancel of ``task_id`` would reach with it: the
    tasks it spawned, theirs, and so on (for a confirmation; the cancel
    itself decides in its own transaction)."""
    found: list[str] = []
    parents = [task_id]
    while parents:
        children = [child for parent in parents for child in store.child_ids(parent)]
        for child in children:
            record = store.get_task(child)
            if record is not None and record.status in CANCEL.sources:
                found.append(child)
        parents = children
    return found
