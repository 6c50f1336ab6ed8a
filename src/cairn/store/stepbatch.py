"""Several tasks' step writes in one transaction: the backends' half of group
commit (``cairn.store.groupcommit`` decides what goes in a batch).

Each write is the store's own fenced statement with the store's own
parameters (``sql.INSERT_STEP`` / ``sql.UPSERT_STEP``, ``_step_params``), so
each keeps its own row count: 0 means that task's fence moved, and only that
task is told ``LeaseLost``. One task's failure must not fail another's write:

* **SQLite** rolls back only the failing statement and keeps the transaction
  (its default ``ABORT`` conflict resolution), so a write that fails (a
  constraint, text it cannot store) gets its own error and the others commit.
  A first write that meets a row already there falls back to the upsert inside
  the transaction, as ``record_step`` does. An error that ends the transaction
  itself (a full disk, an I/O error), or a failed ``COMMIT``, rolls everything
  back, and then each write is run again alone (``record_step``): each task
  gets exactly the answer it would have had without group commit.
* **PostgreSQL** ends a transaction at its first error, so the batch is one
  pipelined transaction (one round trip) of upserts: if the server refuses any
  of it, nothing was written, and each write is run again alone. A retried
  batch (the connection dropped after the commit) is harmless: every row is a
  fenced upsert of the same values.
* A store that cannot be reached (SQLite locked past its busy timeout, the
  PostgreSQL server gone past its reconnect timeout) fails every write of the
  batch with that error: trying each alone would only wait as long again.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from cairn.errors import StoreError, StoreUnavailable
from cairn.store import sql
from cairn.store.driver_errors import unstorable_text
from cairn.store.postgres import PostgresStore
from cairn.store.sqlite import SQLiteStore
from cairn.store.sqlite import _step_params as _sqlite_step_params

if TYPE_CHECKING:
    import psycopg

    from cairn.store.records import StepRecord

Verdict = bool | BaseException
"""What one queued write came to: True (written), False (its fence moved),
or the error its task must raise."""


class QueuedStep(Protocol):
    """A step write waiting in a batch."""

    step: StepRecord
    fence: int
    first: bool


BatchWriter = Callable[[Sequence[QueuedStep]], list[Verdict]]


def batch_writer(store: object) -> BatchWriter | None:
    """How ``store`` writes a batch of step rows in one transaction (None: it cannot)."""
    if isinstance(store, SQLiteStore):
        return lambda batch: _sqlite_batch(store, batch)
    if isinstance(store, PostgresStore):
        return lambda batch: _postgres_batch(store, batch)
    return None


def leaders_for(store: object) -> int:
    """How many commits of step rows may run at once on ``store``: one on
    SQLite (one writer per file), one per pooled connection on PostgreSQL."""
    if isinstance(store, PostgresStore):
        return max(1, store.pool_size)
    return 1


def each_alone(store: Any, batch: Sequence[QueuedStep]) -> list[Verdict]:
    """Every write of ``batch`` in its own transaction, with its own answer."""
    verdicts: list[Verdict] = []
    for queued in batch:
        try:
            verdicts.append(bool(store.record_step(queued.step, queued.fence, first=queued.first)))
        except BaseException as exc:  # noqa: BLE001 - the write's own error, for its task
            verdicts.append(exc)
    return verdicts


# -- SQLite ------------------------------------------------------------------------------
def _sqlite_error(store: SQLiteStore, exc: sqlite3.Error) -> StoreError:
    """The cairn error ``exc`` means for the store's file."""
    try:
        store._failed(exc)
    except StoreError as error:
        return error


def _sqlite_one(conn: sqlite3.Connection, params: tuple[Any, ...], first: bool) -> bool:
    if first:
        try:
            return conn.execute(sql.INSERT_STEP, params).rowcount == 1
        except sqlite3.IntegrityError:
            pass  # the position was written after all; only this statement was undone
    return conn.execute(sql.UPSERT_STEP, params).rowcount == 1


def _sqlite_batch(store: SQLiteStore, batch: Sequence[QueuedStep]) -> list[Verdict]:
    rows = [(_sqlite_step_params(q.step, q.fence), q.first) for q in batch]
    with store._writing():
        conn = store._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            error = _sqlite_error(store, exc)  # locked past the busy timeout, and so on
            return [error] * len(batch)
        verdicts: list[Verdict] = []
        for params, first in rows:
            try:
                verdicts.append(_sqlite_one(conn, params, first))
            except UnicodeEncodeError as exc:
                verdicts.append(unstorable_text(exc))  # refused before SQLite saw it
            except sqlite3.Error as exc:
                if not conn.in_transaction:
                    return each_alone(store, batch)  # the error ended the transaction
                verdicts.append(_sqlite_error(store, exc))
        try:
            conn.execute("COMMIT")
        except sqlite3.Error:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            return each_alone(store, batch)
    return verdicts


# -- PostgreSQL --------------------------------------------------------------------------
def _postgres_batch(store: PostgresStore, batch: Sequence[QueuedStep]) -> list[Verdict]:
    rows = [store._step_params(q.step, q.fence) for q in batch]
    statement = sql.UPSERT_STEP.replace("?", "%s")

    def write(conn: psycopg.Connection[Any]) -> list[Verdict]:
        with conn.pipeline(), conn.transaction():
            cursors = [conn.execute(statement, params) for params in rows]
        return [cursor.rowcount == 1 for cursor in cursors]

    try:
        return store._run(write, lambda: "a group commit of step rows to steps")
    except StoreUnavailable as exc:
        return [exc] * len(batch)
    except Exception:  # noqa: BLE001 - refused, or a value psycopg could not send
        return each_alone(store, batch)  # nothing was written: each alone, its own answer
