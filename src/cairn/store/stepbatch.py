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
  fenced upsert of the same values, or a claim or record that finds its own
  row already written and counts it as written.
* A store that cannot be reached (SQLite locked past its busy timeout, the
  PostgreSQL server gone past its reconnect timeout) fails every write of the
  batch with that error: trying each alone would only wait as long again.

Not only step rows: a write is one of ``WRITE_KINDS``. A ``ctx.once`` claim
(``CLAIM``) and its record (``SETTLE``) are the store's own fenced statements
(``sql.CLAIM_OP``, ``sql.SETTLE_OP``), and a conversation's new messages
(``MESSAGES``) its fenced ``sql.INSERT_MESSAGE``, one per message. Each is
judged by its own row count as a step is. Several messages of one write are
all or none: on SQLite inside a savepoint of their own (the batch holds the
file's write lock, so no fence moves between them anyway); on PostgreSQL, whose
statements each see the latest commit, such a write is not batched at all
(``batches_multirow``). A write whose statement is refused in a way that only
its own solo path knows how to answer (a message whose position is taken: the
solo path tells a retried write of its own from a real clash) is undone (its
savepoint, or its one statement) and run alone after the batch commits.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from cairn.errors import CodecError, StoreError, StoreUnavailable
from cairn.store import sql
from cairn.store.driver_errors import unstorable_text
from cairn.store.postgres import PostgresStore
from cairn.store.sqlite import SQLiteStore
from cairn.store.sqlite import _step_insert as _sqlite_step_insert
from cairn.store.sqlite import _step_params as _sqlite_step_params

if TYPE_CHECKING:
    import psycopg

    from cairn.store.records import StepRecord

Verdict = object
"""What one queued write came to: True (written), False (its fence moved), the
error its task must raise, or (a write run alone) what the store's own method
returned (an ``OperationClaim`` for a claim)."""

# The kinds of write a batch holds (``QueuedStep.kind``), and what ``args`` is:
STEP = 0  # a step row (``step``; ``first``: a new position)
SETTLE = 1  # ctx.once's record: args (scope, key, calls, result); ``step`` its entry
CLAIM = 2  # ctx.once's claim: args (scope, key, task_id, seq, now)
MESSAGES = 3  # conversation messages: args (conv_id, [MessageRecord, ...])
WRITE_KINDS = (STEP, SETTLE, CLAIM, MESSAGES)


class QueuedStep(Protocol):
    """A write waiting in a batch (a step row, or another kind: ``kind``)."""

    @property
    def kind(self) -> int: ...
    @property
    def step(self) -> StepRecord | None: ...
    @property
    def args(self) -> tuple[Any, ...]: ...
    @property
    def fence(self) -> int: ...
    @property
    def first(self) -> bool: ...


def batches_multirow(store: object) -> bool:
    """Whether a write of several messages may share a batch on ``store``."""
    return isinstance(store, SQLiteStore)


def alone(store: Any, queued: QueuedStep) -> Verdict:
    """``queued`` in its own transaction, through the store's own method: what it
    returns (a bool; for a claim, the ``OperationClaim``)."""
    kind = queued.kind
    if kind == STEP:
        assert queued.step is not None
        return bool(store.record_step(queued.step, queued.fence, first=queued.first))
    if kind == SETTLE:
        scope, key, calls, result = queued.args
        return bool(store.complete_operation(scope, key, calls, result, queued.step, queued.fence))
    if kind == CLAIM:
        scope, key, task_id, seq, now = queued.args
        return store.claim_operation(scope, key, task_id, seq, queued.fence, now)
    conv_id, messages = queued.args
    if len(messages) == 1:
        return bool(store.append_message(conv_id, messages[0], queued.fence))
    return bool(store.append_messages(conv_id, messages, queued.fence))


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
    return [alone_or_error(store, queued) for queued in batch]


def alone_or_error(store: Any, queued: QueuedStep) -> Verdict:
    """``alone``, its error (if any) kept as its verdict."""
    try:
        return alone(store, queued)
    except BaseException as exc:  # noqa: BLE001 - the write's own error, for its task
        return exc


# A write whose own solo path must answer it: run alone once the batch committed.
_ALONE = object()


def _settle_params(store: Any, queued: QueuedStep) -> tuple[Any, ...]:
    scope, key, calls, result = queued.args
    step = queued.step
    assert step is not None
    return store._settle_params(  # type: ignore[no-any-return]
        scope, key, calls, "completed", result, None, False, step.finished_at, step.task_id,
        queued.fence,
    )  # fmt: skip


def _claim_params(store: Any, queued: QueuedStep) -> tuple[Any, ...]:
    scope, key, task_id, seq, now = queued.args
    stamp = store._ts(now)
    return (scope, key, task_id, seq, queued.fence, stamp, stamp, stamp, task_id, queued.fence)


def _message_rows(store: Any, queued: QueuedStep) -> list[tuple[Any, ...]]:
    conv_id, messages = queued.args
    return [store._message_params(conv_id, m, queued.fence) for m in messages]


# -- SQLite ------------------------------------------------------------------------------
def _sqlite_error(store: SQLiteStore, exc: sqlite3.Error) -> StoreError:
    """The cairn error ``exc`` means for the store's file."""
    try:
        store._failed(exc)
    except StoreError as error:
        return error


def _sqlite_messages(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> object:
    """Insert one write's messages: True, False (the fence moved: none is
    written) or ``_ALONE`` (a position was taken: none is written)."""
    if len(rows) == 1:
        try:
            return conn.execute(sql.INSERT_MESSAGE, rows[0]).rowcount == 1
        except sqlite3.IntegrityError:
            return _ALONE  # only this statement was undone
    conn.execute("SAVEPOINT cairn_messages")
    try:
        written = all(conn.execute(sql.INSERT_MESSAGE, row).rowcount == 1 for row in rows)
    except sqlite3.IntegrityError:
        written = None
    if not written:
        conn.execute("ROLLBACK TO cairn_messages")
    conn.execute("RELEASE cairn_messages")
    return _ALONE if written is None else written


def _sqlite_statement(store: SQLiteStore, queued: QueuedStep) -> tuple[str | None, Any]:
    """One queued write's statement and parameters (None: messages, and their
    rows), made before the write lock is taken. A step's first write is the
    store's own insert (the shorter one for a call that returned)."""
    kind = queued.kind
    if kind == STEP:
        assert queued.step is not None
        if queued.first:
            return _sqlite_step_insert(queued.step, queued.fence)
        return sql.UPSERT_STEP, _sqlite_step_params(queued.step, queued.fence)
    if kind == SETTLE:
        return sql.SETTLE_OP, _settle_params(store, queued)
    if kind == CLAIM:
        return sql.CLAIM_OP, _claim_params(store, queued)
    return None, _message_rows(store, queued)


def _sqlite_write(
    conn: sqlite3.Connection, queued: QueuedStep, statement: str | None, params: Any
) -> object:
    """One queued write, inside the batch's transaction."""
    if statement is None:
        return _sqlite_messages(conn, params)
    try:
        return conn.execute(statement, params).rowcount == 1
    except sqlite3.IntegrityError:
        if queued.kind != STEP or statement is sql.UPSERT_STEP:
            raise
    # A step's position was written after all (only this statement was undone):
    # the upsert, as record_step falls back to.
    assert queued.step is not None
    upsert = _sqlite_step_params(queued.step, queued.fence)
    return conn.execute(sql.UPSERT_STEP, upsert).rowcount == 1


def _sqlite_batch(store: SQLiteStore, batch: Sequence[QueuedStep]) -> list[Verdict]:
    try:
        statements = [_sqlite_statement(store, q) for q in batch]
    except CodecError:
        return each_alone(store, batch)  # a value the store cannot encode: its own error
    with store._writing():
        conn = store._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            error = _sqlite_error(store, exc)  # locked past the busy timeout, and so on
            return [error] * len(batch)
        verdicts: list[Verdict] = []
        for queued, (statement, params) in zip(batch, statements, strict=True):
            try:
                verdicts.append(_sqlite_write(conn, queued, statement, params))
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
    return _then_alone(store, batch, verdicts)


def _then_alone(store: Any, batch: Sequence[QueuedStep], verdicts: list[Verdict]) -> list[Verdict]:
    """The batch committed: run alone the writes it left to their own path."""
    for i, verdict in enumerate(verdicts):
        if verdict is _ALONE:
            verdicts[i] = alone_or_error(store, batch[i])
    return verdicts


# -- PostgreSQL --------------------------------------------------------------------------
def _postgres_statements(store: PostgresStore, queued: QueuedStep) -> tuple[str, tuple[Any, ...]]:
    """The one statement of a queued write (a step is always an upsert, so a
    retried batch is harmless), in PostgreSQL's placeholders."""
    kind = queued.kind
    if kind == STEP:
        assert queued.step is not None
        return _PG_UPSERT_STEP, store._step_params(queued.step, queued.fence)
    if kind == SETTLE:
        return _PG_SETTLE_OP, _settle_params(store, queued)
    if kind == CLAIM:
        return _PG_CLAIM_OP, _claim_params(store, queued)
    [row] = _message_rows(store, queued)  # several messages are never batched here
    return _PG_INSERT_MESSAGE, row


_PG_UPSERT_STEP = sql.UPSERT_STEP.replace("?", "%s")
_PG_SETTLE_OP = sql.SETTLE_OP.replace("?", "%s")
_PG_CLAIM_OP = sql.CLAIM_OP.replace("?", "%s")
_PG_INSERT_MESSAGE = sql.INSERT_MESSAGE.replace("?", "%s")


def _postgres_batch(store: PostgresStore, batch: Sequence[QueuedStep]) -> list[Verdict]:
    try:
        statements = [_postgres_statements(store, q) for q in batch]
    except CodecError:
        return each_alone(store, batch)  # a value the store cannot encode: its own error

    def write(conn: psycopg.Connection[Any]) -> list[Verdict]:
        with conn.pipeline(), conn.transaction():
            cursors = [conn.execute(statement, params) for statement, params in statements]
        return [cursor.rowcount == 1 for cursor in cursors]

    try:
        return store._run(write, lambda: "a group commit of fenced writes")
    except StoreUnavailable as exc:
        return [exc] * len(batch)
    except Exception:  # noqa: BLE001 - refused, or a value psycopg could not send
        return each_alone(store, batch)  # nothing was written: each alone, its own answer
