"""SQL for moving a batch between stores, pruning finished batches, and finding
the blobs a store refers to. Portable SQL (SQLite and PostgreSQL alike), run
by ``cairn.store.sqltransfer``; never on the hot path.

Every statement is built from the table descriptions (``cairn.store.tables``),
so an export reads, an import writes and a prune deletes every column and every
table of a batch, and a column added to a table is carried without a change here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from cairn.store import tables
from cairn.store.tables import Table


@dataclass(frozen=True, slots=True)
class BatchPart:
    """The rows of one table that belong to a batch: ``where`` picks them (its
    one parameter is the batch's name), and an export writes them in ``order``."""

    table: Table
    where: str
    order: str

    @property
    def select(self) -> str:
        """Every carried column of the batch's rows, in export order."""
        return (
            f"SELECT {self.table.listed()} FROM {self.table.name} "
            f"WHERE {self.where} ORDER BY {self.order}"
        )

    @property
    def delete(self) -> str:
        return f"DELETE FROM {self.table.name} WHERE {self.where}"


def insert(table: Table, *, derived: tuple[str, ...] = ()) -> str:
    """An import's insert of one row of ``table``: every carried column but the one
    the store assigns, whose new value the statement returns, then the
    ``derived`` ones (internal columns the import works out, a checksum)."""
    names = [c.name for c in table.written] + list(derived)
    statement = (
        f"INSERT INTO {table.name} ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)})"
    )
    identity = table.identity
    return statement if identity is None else f"{statement} RETURNING {identity.name}"


def find_row(table: Table, given: Iterable[str], null: Iterable[str]) -> str:
    """A look for a row of ``table`` whose columns ``given`` hold the values
    given (in that order) and whose columns ``null`` are NULL."""
    where = [f"{name} = ?" for name in given] + [f"{name} IS NULL" for name in null]
    return f"SELECT 1 FROM {table.name} WHERE {' AND '.join(where) or '1 = 1'}"


def tasks_among(count: int) -> str:
    """A look for which of ``count`` task ids (the parameters) the store has."""
    return f"SELECT id FROM tasks WHERE id IN ({', '.join('?' * count)})"


_OF_BATCH = "task_id IN (SELECT id FROM tasks WHERE batch = ?)"
# A batch's rows, parents before children: the order of an export file, in
# which an import can insert them (a conversation before the messages that
# refer to its key), and, reversed, the order a prune deletes them in.
BATCH_PARTS: tuple[BatchPart, ...] = (
    BatchPart(tables.BATCHES, "name = ?", "name"),
    BatchPart(tables.TASKS, "batch = ?", "pos"),  # pos: the order they were enqueued in
    BatchPart(tables.STEPS, _OF_BATCH, "task_id, seq"),
    BatchPart(tables.TASK_RUNS, _OF_BATCH, "task_id, run"),
    BatchPart(tables.SUPERSEDED_ENTRIES, _OF_BATCH, "task_id, run, seq"),
    BatchPart(tables.OPERATIONS, _OF_BATCH, "scope, key"),
    BatchPart(tables.SIGNALS, _OF_BATCH, "task_id, name"),
    BatchPart(tables.TASK_LOGS, _OF_BATCH, "task_id"),
    BatchPart(tables.CONVERSATIONS, _OF_BATCH, "conv_id"),
    BatchPart(
        tables.MESSAGES,
        f"conv_id IN (SELECT conv_id FROM conversations WHERE {_OF_BATCH})",
        "conv_id, idx",
    ),
)
# The tables whose rows belong to no batch: the store's own bookkeeping, and the
# shared limits (a finished task's permit still counts for its rate window, so
# a prune must not hand that room back early) and the schedules.
NOT_OF_A_BATCH: tuple[Table, ...] = (
    tables.CAIRN_META,
    tables.LIMITS,
    tables.PERMITS,
    tables.SCHEDULES,
    tables.WORKERS,  # the versions each live worker claims: of the processes, not a batch
    tables.AUDIT,  # what operators did, to any task or filter: kept when a batch is pruned
    # Budgets count with permits (kept, above), so they stay with them.
    tables.BUDGETS,
    tables.BUDGET_PARKS,
    tables.METRIC_HOURS,  # the store's finishes per hour: a derived figure, of no batch
)

# Pruning: a batch's rows, children first.
BATCH_STATUS = (
    "SELECT status, COUNT(*), MAX(finished_at) FROM tasks WHERE batch = ? GROUP BY status"
)
ALL_BATCHES = "SELECT name FROM batches ORDER BY created_at, name"
PRUNE_BATCH = tuple(part.delete for part in reversed(BATCH_PARTS))

# Retention (cairn.retention): a batch's tasks of one status finished before a
# time, found through the tasks' (batch, status, pos) index, a chunk at a time.
# The store's own notes (the policy, the next run) are rows of cairn_meta; a
# worker takes a run's turn by moving its time on, if it is due, in one statement.
META_VALUE = "SELECT value FROM cairn_meta WHERE key = ?"
PUT_META = (
    "INSERT INTO cairn_meta (key, value) VALUES (?, ?) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)
TAKE_TURN = (
    "INSERT INTO cairn_meta (key, value) VALUES (?, ?) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value WHERE cairn_meta.value <= ?"
)
# A batch with a task not finished (its statuses named, so each is a probe of
# that index) is not touched: checked in the same statement as the deletion's
# pick, so a task enqueued into the batch since it was looked at keeps it whole.
EXPIRED_TASKS = (
    "SELECT id FROM tasks WHERE batch = ? AND status = ? AND finished_at < ? "
    "AND NOT EXISTS (SELECT 1 FROM tasks u WHERE u.batch = ? "
    "AND u.status IN ('pending', 'running', 'waiting')) LIMIT ?"
)
COUNT_EXPIRED = "SELECT COUNT(*) FROM tasks WHERE batch = ? AND status = ? AND finished_at < ?"
# A batch's row goes with its last task.
DROP_EMPTY_BATCH = (
    "DELETE FROM batches WHERE name = ? AND NOT EXISTS (SELECT 1 FROM tasks WHERE batch = ?)"
)


def delete_tasks(count: int) -> tuple[str, ...]:
    """Statements that delete ``count`` tasks (their ids the parameters, once
    each) with every row of theirs, children first: the batch's parts but the
    batch's own row, each picked by task id instead of by batch."""
    ids = f"IN ({', '.join('?' * count)})"
    of_tasks = f"task_id {ids}"
    statements = []
    for part in reversed(BATCH_PARTS[1:]):
        where = (
            f"id {ids}" if part.table is tables.TASKS else part.where.replace(_OF_BATCH, of_tasks)
        )
        statements.append(f"DELETE FROM {part.table.name} WHERE {where}")
    return tuple(statements)


# Every value that may be a blob reference (cairn.blobs.ref: text starting '!blob:'),
# each query with its parameters: the first bytes compared with the prefix, which is
# exact and alike on both backends (LIKE is not: SQLite's does not match a BLOB, and
# psycopg would take its '%' for a placeholder). A message's content is bytes (BLOB,
# BYTEA); an offloaded message's bytes are the reference text itself
# (cairn.store.sql.pack_content), so it is compared with the prefix as bytes.
BLOB_PREFIX = "!blob:"
_PREFIX_BYTES = BLOB_PREFIX.encode()


def _refs_in(table: str, column: str, prefix: str | bytes) -> tuple[str, tuple[object, ...]]:
    where = f"substr({column}, 1, {len(prefix)}) = ?"
    return f"SELECT {column} FROM {table} WHERE {where}", (prefix,)


def _refs_inside(table: str, column: str) -> tuple[str, tuple[object, ...]]:
    # The caller finds the references in the text (cairn.portable._refs).
    return f"SELECT {column} FROM {table} WHERE {column} LIKE ?", (f"%{BLOB_PREFIX}%",)


BLOB_REFERENCES: tuple[tuple[str, tuple[object, ...]], ...] = tuple(
    _refs_inside(table.name, c.name)
    if c.refs_inside
    else _refs_in(table.name, c.name, BLOB_PREFIX.encode() if c.kind == "packed" else BLOB_PREFIX)
    for table in tables.TABLES
    for c in table.columns
    if c.blob_refs
)


def ref_texts(values: Iterable[object]) -> Iterator[str]:
    """The reference text of each value ``BLOB_REFERENCES`` found: a text column
    holds it as is, a message's content column as its bytes."""
    for value in values:
        if isinstance(value, bytes | bytearray | memoryview):
            raw = bytes(value)
            if raw.startswith(_PREFIX_BYTES):
                yield raw.decode()
        elif isinstance(value, str):
            yield value
