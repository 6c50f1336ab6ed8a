"""SQL for moving a batch between stores, pruning finished batches, and finding
the blobs a store refers to. Portable SQL (SQLite and PostgreSQL alike), run
through a ``SQLStore``'s ``_exec`` / ``_atomically``; never on the hot path.

A table is described by its columns and which of them hold times, so a row can
be written out as JSON (times as ISO text) and read into either backend.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Table:
    """One table as an export carries it."""

    name: str
    columns: tuple[str, ...]
    times: frozenset[str] = frozenset()

    def select(self, where: str) -> str:
        return f"SELECT {', '.join(self.columns)} FROM {self.name} WHERE {where}"

    def insert(self) -> str:
        marks = ", ".join("?" for _ in self.columns)
        return f"INSERT INTO {self.name} ({', '.join(self.columns)}) VALUES ({marks})"


def _columns(names: str) -> tuple[str, ...]:
    return tuple(names.split(", "))


BATCHES = Table("batches", ("name", "task_name", "created_at"), frozenset({"created_at"}))
TASKS = Table(
    "tasks",
    _columns(
        "id, batch, item_key, name, args, codec, status, attempts, retry_base, fence, "
        "owner, lease_expires_at, result, error, created_at, started_at, finished_at, "
        "updated_at, interruptions, wake_at, parent_id"
    ),
    frozenset(
        {"lease_expires_at", "created_at", "started_at", "finished_at", "updated_at", "wake_at"}
    ),
)
STEPS = Table(
    "steps",
    _columns(
        "task_id, seq, kind, name, status, output, attempts, task_attempt, run_attempts, "
        "error, retry_at, started_at, finished_at"
    ),
    frozenset({"retry_at", "started_at", "finished_at"}),
)
OPERATIONS = Table(
    "operations",
    _columns(
        "scope, key, status, calls, permanent, task_id, step_seq, claim_fence, result, "
        "error, first_claimed_at, claimed_at, completed_at, updated_at"
    ),
    frozenset({"first_claimed_at", "claimed_at", "completed_at", "updated_at"}),
)
SIGNALS = Table(
    "signals", ("task_id", "name", "payload", "codec", "sent_at"), frozenset({"sent_at"})
)
# conv_id is given anew by the importing store; messages are mapped to it.
CONVERSATIONS = Table("conversations", ("task_id", "name"))
MESSAGES = Table(
    "messages",
    ("conv_id", "idx", "role", "content", "tokens", "kind", "covers_until", "meta", "created_at"),
)

_OF_BATCH = "task_id IN (SELECT id FROM tasks WHERE batch = ?)"
BATCH_ROW = BATCHES.select("name = ?")
BATCH_TASKS = TASKS.select("batch = ?") + " ORDER BY pos"
BATCH_STEPS = STEPS.select(_OF_BATCH) + " ORDER BY task_id, seq"
BATCH_OPERATIONS = OPERATIONS.select(_OF_BATCH) + " ORDER BY scope, key"
BATCH_SIGNALS = SIGNALS.select(_OF_BATCH) + " ORDER BY task_id, name"
BATCH_CONVERSATIONS = (
    f"SELECT conv_id, task_id, name FROM conversations WHERE {_OF_BATCH} ORDER BY conv_id"
)
CONVERSATION_MESSAGES = MESSAGES.select("conv_id = ?") + " ORDER BY idx"
INSERT_CONVERSATION = "INSERT INTO conversations (task_id, name) VALUES (?, ?) RETURNING conv_id"

# Conflicts an import must refuse before writing anything.
BATCH_EXISTS = "SELECT name FROM batches WHERE name = ?"
TASK_EXISTS = "SELECT id FROM tasks WHERE id = ?"
OPERATION_EXISTS = "SELECT key FROM operations WHERE scope = ? AND key = ?"

# Pruning: a batch's rows, children first.
BATCH_STATUS = (
    "SELECT status, COUNT(*), MAX(finished_at) FROM tasks WHERE batch = ? GROUP BY status"
)
ALL_BATCHES = "SELECT name FROM batches ORDER BY created_at, name"
_CONVS_OF_BATCH = f"conv_id IN (SELECT conv_id FROM conversations WHERE {_OF_BATCH})"
PRUNE_BATCH = (
    f"DELETE FROM messages WHERE {_CONVS_OF_BATCH}",
    f"DELETE FROM conversations WHERE {_OF_BATCH}",
    f"DELETE FROM steps WHERE {_OF_BATCH}",
    f"DELETE FROM operations WHERE {_OF_BATCH}",
    f"DELETE FROM signals WHERE {_OF_BATCH}",
    "DELETE FROM tasks WHERE batch = ?",
    "DELETE FROM batches WHERE name = ?",
)

# Every value that may be a blob reference (cairn.blobs.ref: text starting '!blob:'),
# each query with its parameters: the first bytes compared with the prefix, which is
# exact and alike on both backends (LIKE is not: SQLite's does not match a BLOB, and
# psycopg would take its '%' for a placeholder). A message's content is bytes (BLOB,
# BYTEA); an offloaded message's bytes are the reference text itself
# (cairn.store.sql.pack_content), so it is compared with the prefix as bytes.
_PREFIX = "!blob:"


def _refs_in(table: str, column: str, prefix: str | bytes) -> tuple[str, tuple[object, ...]]:
    where = f"substr({column}, 1, {len(prefix)}) = ?"
    return f"SELECT {column} FROM {table} WHERE {where}", (prefix,)


BLOB_REFERENCES: tuple[tuple[str, tuple[object, ...]], ...] = (
    _refs_in("steps", "output", _PREFIX),
    _refs_in("tasks", "result", _PREFIX),
    _refs_in("tasks", "args", _PREFIX),
    _refs_in("operations", "result", _PREFIX),
    _refs_in("messages", "content", _PREFIX.encode()),
)
