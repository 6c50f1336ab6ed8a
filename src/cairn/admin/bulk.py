"""Retry or cancel every task a filter picks (a batch, a status, an error group,
any ``TaskQuery`` of the listing), as the dashboard's bulk actions do.

``selection`` counts, before anything changes, the tasks the action would
touch (those the filter picks in a status the action may move) and names the
first of them, for the confirmation. ``apply_to_query`` then changes them one
task at a time (each one store call that checks the status itself, so a task
that moved meanwhile is left alone and not counted); the whole action is one
entry of the audit trail. A cancel reaches each task's spawned children.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime

from cairn.admin.actions import CANCEL, Action
from cairn.admin.audit import Actor, audit
from cairn.store import AdminStore
from cairn.store.records import TaskRecord
from cairn.store.reports import TaskQuery

__all__ = ["QueryApplied", "Selection", "apply_to_query", "describe_query", "selection"]

# A confirmation names this many of the tasks it touches.
SAMPLE = 20


def describe_query(query: TaskQuery) -> str:
    """The filter in words, for the confirmation and the audit trail:
    ``batch=B status=failed error=builtins.ValueError``."""
    parts = [
        f"{name}={value}"
        for name, value in (
            ("batch", query.batch),
            ("status", query.status),
            ("error", query.error_type),
            ("name", query.name),
            ("search", query.search),
            ("since", None if query.since is None else query.since.isoformat()),
            ("until", None if query.until is None else query.until.isoformat()),
        )
        if value is not None
    ]
    if query.include_internal:
        parts.append("internal")
    return " ".join(parts) or "every task"


def _statuses(action: Action, query: TaskQuery) -> tuple[str, ...]:
    """The statuses the action may move among those the filter picks."""
    if query.status is None:
        return action.sources
    return (query.status,) if query.status in action.sources else ()


@dataclass(frozen=True, slots=True)
class Selection:
    """The tasks an action on a filter would touch: how many, and the first few."""

    action: Action
    query: TaskQuery
    count: int
    sample: list[TaskRecord]

    @property
    def described(self) -> str:
        return describe_query(self.query)


def selection(store: AdminStore, action: Action, query: TaskQuery) -> Selection:
    """Count the tasks ``action`` would touch among those ``query`` picks."""
    statuses = _statuses(action, query)
    count = sum(store.count_tasks(replace(query, status=s)) for s in statuses)
    sample: list[TaskRecord] = []
    for status in statuses:
        sample += store.list_tasks(query=replace(query, status=status), limit=SAMPLE - len(sample))
        if len(sample) >= SAMPLE:
            break
    return Selection(action, query, count, sample)


@dataclass(frozen=True, slots=True)
class QueryApplied:
    """What an action on a filter changed: the ids, in the order changed, and
    (a cancel) the spawned tasks it reached too."""

    action: Action
    query: TaskQuery
    changed: list[str]
    children: list[str]

    @property
    def count(self) -> int:
        return len(self.changed) + len(self.children)

    def summary(self) -> str:
        text = f"{len(self.changed)} task(s) {self.action.done} ({describe_query(self.query)})"
        if self.children:
            text += f"; {len(self.children)} of their spawned tasks cancelled with them"
        return text


def _picked(store: AdminStore, action: Action, query: TaskQuery) -> Iterator[TaskRecord]:
    for status in _statuses(action, query):
        # Read a page at a time by position: changing a task meanwhile is fine.
        yield from store.list_tasks(query=replace(query, status=status))


def apply_to_query(
    store: AdminStore,
    action: Action,
    query: TaskQuery,
    now: datetime,
    *,
    actor: Actor | None = None,
) -> QueryApplied:
    """Apply ``action`` to every task ``query`` picks that it may move, as
    ``actor``, one audit entry for the whole."""
    changed: list[str] = []
    children: list[str] = []
    reached: set[str] = set()
    with audit(store, actor, action.name, describe_query(query), now) as entry:
        for task in _picked(store, action, query):
            if task.id in reached:
                continue  # cancelled already, as a child of a task before it
            if action is CANCEL:
                family = store.cancel_family(task.id, now)
                if family:
                    changed.append(task.id)
                    children += family[1:]
                    reached.update(family)
            elif action.apply(store, task.id, now):
                changed.append(task.id)
        applied = QueryApplied(action, query, changed, children)
        entry.done(applied.count, applied.summary())
    return applied
