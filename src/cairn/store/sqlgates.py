"""Debounced and singleton enqueues, over SQL (docs/debounce.md).

Both are settled by the store's unique partial indexes (schema 13), never by a
look followed by an insert:

* a debounced event is one upsert on ``tasks_debounce_open``: it makes the
  key's waiting task, or lands on it (its arguments replaced, its ``wake_at``
  pushed, its event count raised), whichever process sends it. Concurrent
  upserts of one key are ordered by the row's lock (PostgreSQL) or the write
  lock (SQLite): the last to commit wins, and the count it returns is its place
  in that order;
* a singleton task is inserted as its key's holder unless
  ``tasks_singleton_held`` already has one. Otherwise it is dropped (the
  holder's id is the answer) or queued behind the holder, in a statement that
  share-locks the holder, so the holder cannot end unseen meanwhile: the
  trigger that hands the key on when a holder ends (schema 13) finds it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from cairn.errors import StoreError, TaskConflict
from cairn.store import sql
from cairn.store.driver_errors import DuplicateRow
from cairn.store.records import Gated, NewTask
from cairn.store.sqlcore import SQLCore, Tx

_COLUMNS = (
    "id, batch, item_key, name, args, codec, status, created_at, updated_at, "
    "parent_id, version, priority"
)
_OPEN = (
    "debounce_key IS NOT NULL AND started_at IS NULL AND (status = 'pending' OR status = 'waiting')"
)
_HELD = (
    "singleton_key IS NOT NULL AND (status = 'pending' OR status = 'running' OR status = 'waiting')"
)
# The event's task, or the open one of its key with the event's arguments, the
# window from now, and one more event (``tasks.debounce_events``: the row's
# count before this event; a backend reads ``excluded`` the same way).
DEBOUNCE = (
    f"INSERT INTO tasks ({_COLUMNS}, wake_at, debounce_key, debounce_ms, debounce_events) "
    "VALUES (?, ?, ?, ?, ?, ?, 'waiting', ?, ?, NULL, ?, ?, ?, ?, ?, 1) "
    f"ON CONFLICT (debounce_key) WHERE {_OPEN} DO UPDATE SET "
    "args = excluded.args, codec = excluded.codec, wake_at = excluded.wake_at, "
    "status = 'waiting', updated_at = excluded.updated_at, version = excluded.version, "
    "priority = excluded.priority, debounce_ms = excluded.debounce_ms, "
    "debounce_events = tasks.debounce_events + 1 "
    "RETURNING id, debounce_events"
)
# The key's holder, unless it has one (or the id is taken: never, ids are new).
HOLD = (
    f"INSERT INTO tasks ({_COLUMNS}, singleton_key) "
    "VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?, NULL, ?, ?, ?) ON CONFLICT DO NOTHING"
)
# Queued behind the key's holder, only while it holds the key ({lock}: FOR
# SHARE, so a holder ending meanwhile waits for this insert, and its trigger
# then sees this task; or this insert waits for it, then finds no holder).
QUEUE = (
    f"INSERT INTO tasks ({_COLUMNS}, singleton_queued) "
    "SELECT ?, ?, ?, ?, ?, ?, 'waiting', ?, ?, NULL, ?, ?, ? "
    f"WHERE EXISTS (SELECT 1 FROM tasks WHERE singleton_key = ? AND {_HELD}{{lock}}) "
    "ON CONFLICT DO NOTHING"
)
HOLDER = f"SELECT id FROM tasks WHERE singleton_key = ? AND {_HELD}"
# This very task, found by a try again after its answer was lost.
OWN_TASK = "SELECT singleton_queued, debounce_events FROM tasks WHERE id = ?"
# A holder that ends between two statements sends the loop round again; each
# round means another transaction changed the key, so many in a row means
# something is wrong, not busy.
_ROUNDS = 100


def _row(task: NewTask, stamp: Any) -> list[Any]:
    return [
        task.id,
        task.batch,
        task.item_key,
        task.name,
        task.args,
        task.codec,
        stamp,
        stamp,
        task.version,
        task.priority,
    ]


class SQLGates(SQLCore):
    """Debounced and singleton enqueues over the primitives."""

    def debounce(
        self, task: NewTask, key: str, window_ms: int, due: datetime, now: datetime
    ) -> Gated:
        stamp = self._ts(now)
        params = [*_row(task, stamp), self._ts(due), key, window_ms]

        def work(tx: Tx) -> Gated:
            _add_batch(tx, task, stamp)
            row = tx.exec(DEBOUNCE, params).rows[0]
            made = str(row[0]) == task.id
            return Gated(str(row[0]), "new" if made else "debounced", int(row[1]))

        with self._writing():
            return self._atomically_once(work, _own(task.id, "new"))

    def enqueue_singleton(self, task: NewTask, key: str, queue: bool, now: datetime) -> Gated:
        stamp = self._ts(now)
        row = _row(task, stamp)
        queue_statement = QUEUE.format(lock=self.share_lock_clause)

        def work(tx: Tx) -> Gated:
            _add_batch(tx, task, stamp)
            for _ in range(_ROUNDS):
                if tx.exec(HOLD, [*row, key]).rowcount == 1:
                    if self.announce_work:
                        tx.exec(self.announce_work)  # idle workers wake at commit
                    return Gated(task.id, "new")
                if queue and tx.exec(queue_statement, [*row, key, key]).rowcount == 1:
                    return Gated(task.id, "queued")
                if not queue and (holder := tx.exec(HOLDER, [key]).rows):
                    return Gated(str(holder[0][0]), "dropped")
            raise StoreError(
                f"singleton key {key!r} changed hands {_ROUNDS} times during one enqueue; "
                "nothing was written. Try again."
            )

        with self._writing():
            return self._atomically_once(work, _own(task.id, "singleton"))


def _add_batch(tx: Tx, task: NewTask, stamp: Any) -> None:
    """The task's batch row, written with the task (never an empty batch)."""
    if task.batch is not None:
        tx.exec(sql.INSERT_BATCH, [task.batch, task.name, stamp])


def _own(task_id: str, made: str) -> Callable[[Tx], Gated | None]:
    """The task a try whose answer was lost made, if it made one: its id is new
    to this enqueue, so a row with it is that try's."""

    def find(tx: Tx) -> Gated | None:
        rows = tx.exec(OWN_TASK, [task_id]).rows
        if not rows:
            return None
        if made == "new":
            return Gated(task_id, "new", int(rows[0][1]))
        return Gated(task_id, "new" if rows[0][0] is None else "queued")

    return find


@contextlib.contextmanager
def key_held(what: str) -> Iterator[None]:
    """Around a change that makes finished tasks pending again (``what``: "retry
    task X"): the only unique index it can break is a singleton key's (held by
    another task) or a debounce key's (another event opened a newer task)."""
    try:
        yield
    except DuplicateRow as exc:
        raise TaskConflict(
            f"cannot {what}: its singleton key is held by another task that is pending, "
            "running or waiting (or, debounced, its key has a newer task waiting). Nothing "
            "was changed; try again once that task has ended (cairn tasks shows it)."
        ) from exc
