"""The embedded store: one SQLite file in WAL mode.

Choices that matter for durability and speed:

* WAL with ``synchronous=NORMAL`` by default survives a killed process;
  ``synchronous="FULL"`` also survives power loss.
* Each thread gets its own connection in autocommit mode; multi-statement
  writes use ``BEGIN IMMEDIATE`` so they never deadlock on lock upgrades.
* The per-step write is one statement: ``INSERT … SELECT … WHERE EXISTS`` the
  task row with our fence. One implicit transaction, one commit, and a row
  count of 0 means the fence moved (lease lost or task cancelled).
* Opening a file checks it read-only first, so a file that is not a cairn store,
  or one written by a newer cairn, is reported and left byte-for-byte unchanged.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from itertools import islice
from pathlib import Path
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar

from cairn.clock import from_iso, to_iso
from cairn.errors import NotACairnStore, SchemaTooNew, StoreError
from cairn.store import sqlite_ops
from cairn.store.migrate import latest_version, migrations
from cairn.store.protocol import Capabilities
from cairn.store.records import (
    BatchSummary,
    NewTask,
    OperationClaim,
    OperationRecord,
    StepRecord,
    TaskRecord,
)

Synchronous = Literal["NORMAL", "FULL"]

_SQLITE_MAGIC = b"SQLite format 3\x00"
_ENQUEUE_CHUNK = 500

_TASK_COLUMNS = (
    "id, batch, item_key, name, args, codec, status, attempts, retry_base, fence, owner, "
    "lease_expires_at, result, error, created_at, started_at, finished_at, updated_at"
)
_STEP_COLUMNS = (
    "task_id, seq, kind, name, status, output, attempts, task_attempt, run_attempts, "
    "error, retry_at, started_at, finished_at"
)

# The first write at a position is a plain fenced insert; only a position
# written before (a retried step) pays for the upsert, ~7 us more a step.
_INSERT_STEP = f"""
INSERT INTO steps ({_STEP_COLUMNS})
SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?
WHERE EXISTS (SELECT 1 FROM tasks WHERE id = ? AND fence = ?)
"""

_RECORD_STEP = f"""
INSERT INTO steps ({_STEP_COLUMNS})
SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?
WHERE EXISTS (SELECT 1 FROM tasks WHERE id = ? AND fence = ?)
ON CONFLICT (task_id, seq) DO UPDATE SET
    status = excluded.status, output = excluded.output, attempts = excluded.attempts,
    task_attempt = excluded.task_attempt, run_attempts = excluded.run_attempts,
    error = excluded.error, retry_at = excluded.retry_at,
    started_at = excluded.started_at, finished_at = excluded.finished_at
"""

_CLAIM_SET = (
    "status = 'running', owner = ?, lease_expires_at = ?, fence = fence + 1, "
    "started_at = COALESCE(started_at, ?), updated_at = ?"
)


def _opt_time(text: str | None) -> datetime | None:
    return None if text is None else from_iso(text)


def _task(row: sqlite3.Row | tuple[Any, ...]) -> TaskRecord:
    return TaskRecord(
        id=row[0],
        batch=row[1],
        item_key=row[2],
        name=row[3],
        args=row[4],
        codec=row[5],
        status=row[6],
        attempts=row[7],
        retry_base=row[8],
        fence=row[9],
        owner=row[10],
        lease_expires_at=_opt_time(row[11]),
        result=row[12],
        error=row[13],
        created_at=from_iso(row[14]),
        started_at=_opt_time(row[15]),
        finished_at=_opt_time(row[16]),
        updated_at=from_iso(row[17]),
    )


def _step(row: tuple[Any, ...]) -> StepRecord:
    return StepRecord(
        task_id=row[0],
        seq=row[1],
        kind=row[2],
        name=row[3],
        status=row[4],
        output=row[5],
        attempts=row[6],
        task_attempt=row[7],
        run_attempts=row[8],
        error=row[9],
        retry_at=_opt_time(row[10]),
        started_at=from_iso(row[11]),
        finished_at=from_iso(row[12]),
    )


S = TypeVar("S", bound="SQLiteStore")
P = ParamSpec("P")
R = TypeVar("R")


def _serialized(
    method: Callable[Concatenate[S, P], R],
) -> Callable[Concatenate[S, P], R]:
    """Run a write under the store's process-wide write lock.

    Threads of one process then queue on a Python lock, handed over at once,
    instead of on SQLite's busy handler, which sleeps in steps of milliseconds.
    That keeps each step's work-to-commit window short under concurrency, and
    that window is exactly where a crash makes a step run twice.
    """

    @functools.wraps(method)
    def locked(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with self._write_lock:
            return method(self, *args, **kwargs)

    return locked


def _statements(script: str) -> Iterator[str]:
    """Split a migration into statements (``executescript`` would commit midway)."""
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            yield buffer
            buffer = ""
    if buffer.strip() and not all(
        part.strip().startswith("--") or not part.strip() for part in buffer.splitlines()
    ):
        raise StoreError(f"migration ends with an incomplete statement: {buffer[:80]!r}")


def inspect_file(path: Path) -> int:
    """The cairn schema version of ``path`` (0 for a new or empty database).

    Reads only. Raises ``NotACairnStore`` or ``SchemaTooNew`` without touching it.
    """
    if not path.exists() or path.stat().st_size == 0:
        return 0
    if path.is_dir():
        raise NotACairnStore(f"{path} is a directory; give the path of a cairn .db file")
    with path.open("rb") as handle:
        magic = handle.read(len(_SQLITE_MAGIC))
    if magic != _SQLITE_MAGIC:
        raise NotACairnStore(
            f"{path} is not a SQLite database, so not a cairn store. Point cairn at a "
            "new path (it creates the file) or at an existing cairn .db file. "
            "The file was not changed."
        )
    # A read-write connection that only reads: a read-only one cannot remove
    # the -wal/-shm files it creates for a WAL database, and would leave them
    # beside a file we are refusing.
    conn = sqlite3.connect(path)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not tables:
            return 0
        if "cairn_meta" not in tables:
            raise NotACairnStore(
                f"{path} is a SQLite database of something else (tables: "
                f"{', '.join(sorted(tables)[:5])}). cairn will not write into it; give "
                "cairn a path of its own. The file was not changed."
            )
        row = conn.execute("SELECT value FROM cairn_meta WHERE key = 'schema_version'").fetchone()
    finally:
        conn.close()
    version = int(row[0]) if row else 0
    if version > latest_version("sqlite"):
        raise SchemaTooNew(
            f"{path} was written by a newer cairn (schema {version}; this cairn knows up "
            f"to {latest_version('sqlite')}). Upgrade cairn (`pip install -U cairn`) to "
            "use it. The file was not changed."
        )
    return version


class SQLiteStore:
    """A cairn store in one SQLite file."""

    capabilities = Capabilities(multi_host=False, multi_process=True)

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: Synchronous = "NORMAL",
        busy_timeout_ms: int = 30_000,
    ) -> None:
        if synchronous not in ("NORMAL", "FULL"):
            raise StoreError(f"synchronous must be 'NORMAL' or 'FULL', not {synchronous!r}")
        self.path = Path(path)
        self.url = f"sqlite:///{self.path}"
        self.synchronous = synchronous
        self._busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        self._write_lock = threading.RLock()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        version = inspect_file(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._migrate(version)

    # -- connections -----------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
        return conn

    def _connect(self) -> sqlite3.Connection:
        # check_same_thread=False only so close() may close every thread's
        # connection; each is still used by its own thread alone (threading.local).
        conn = sqlite3.connect(
            self.path,
            isolation_level=None,
            timeout=self._busy_timeout_ms / 1000,
            check_same_thread=False,
        )
        conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
        self._ensure_wal(conn)
        conn.execute(f"PRAGMA synchronous = {self.synchronous}")
        with self._all_lock:
            self._all.append(conn)
        return conn

    def _ensure_wal(self, conn: sqlite3.Connection) -> None:
        """Switch the file to WAL (it stays so). Changing the journal mode takes a
        lock the busy timeout does not wait for, so two processes opening a new
        file at once retry here instead of failing."""
        deadline = time.monotonic() + self._busy_timeout_ms / 1000
        while conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            try:
                conn.execute("PRAGMA journal_mode = WAL")
            except sqlite3.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def close(self) -> None:
        with self._all_lock:
            for conn in self._all:
                with contextlib.suppress(sqlite3.ProgrammingError):
                    conn.close()  # may already be closed from its own thread
            self._all.clear()
        self._local = threading.local()

    def _migrate(self, found: int) -> None:
        conn = self._conn()
        if found == latest_version("sqlite"):
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Read again under the write lock: another process may have migrated.
            current = found
            if conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type='table' AND name='cairn_meta'"
            ).fetchone():
                row = conn.execute(
                    "SELECT value FROM cairn_meta WHERE key='schema_version'"
                ).fetchone()
                current = int(row[0]) if row else 0
            for migration in migrations("sqlite")[current:]:
                for statement in _statements(migration.sql):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO cairn_meta (key, value) VALUES ('schema_version', ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (str(migration.version),),
                )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    # -- creating work -----------------------------------------------------------
    @_serialized
    def ensure_batch(self, name: str, task_name: str, now: datetime) -> None:
        self._conn().execute(
            "INSERT INTO batches (name, task_name, created_at) VALUES (?, ?, ?) "
            "ON CONFLICT (name) DO NOTHING",
            (name, task_name, to_iso(now)),
        )

    def create_task(self, task: NewTask, now: datetime) -> bool:
        return self.enqueue([task], now) == 1

    @_serialized
    def enqueue(self, tasks: Iterable[NewTask], now: datetime) -> int:
        conn = self._conn()
        stamp = to_iso(now)
        inserted = 0
        iterator = iter(tasks)
        # Chunks keep memory flat for huge batches and each chunk one commit.
        while chunk := list(islice(iterator, _ENQUEUE_CHUNK)):
            conn.execute("BEGIN IMMEDIATE")
            try:
                # The batch row is written with its first tasks, never before them:
                # a stream that fails on its first chunk leaves no empty batch.
                conn.executemany(
                    "INSERT INTO batches (name, task_name, created_at) VALUES (?, ?, ?) "
                    "ON CONFLICT (name) DO NOTHING",
                    {(t.batch, t.name, stamp) for t in chunk if t.batch is not None},
                )
                before = conn.total_changes
                conn.executemany(
                    "INSERT INTO tasks (id, batch, item_key, name, args, codec, status, "
                    "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?) "
                    "ON CONFLICT (id) DO NOTHING",
                    [
                        (t.id, t.batch, t.item_key, t.name, t.args, t.codec, stamp, stamp)
                        for t in chunk
                    ],
                )
                inserted += conn.total_changes - before
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return inserted

    # -- ownership ---------------------------------------------------------------
    @_serialized
    def claim_next_pending(
        self, batch: str, owner: str, lease_until: datetime, now: datetime
    ) -> TaskRecord | None:
        stamp = to_iso(now)
        row = (
            self._conn()
            .execute(
                f"UPDATE tasks SET {_CLAIM_SET} WHERE pos = ("
                "SELECT pos FROM tasks WHERE batch = ? AND status = 'pending' "
                "ORDER BY pos LIMIT 1) AND status = 'pending' "
                f"RETURNING {_TASK_COLUMNS}",
                (owner, to_iso(lease_until), stamp, stamp, batch),
            )
            .fetchone()
        )
        return None if row is None else _task(row)

    @_serialized
    def claim_task(
        self, task_id: str, expected_fence: int, owner: str, lease_until: datetime, now: datetime
    ) -> TaskRecord | None:
        stamp = to_iso(now)
        row = (
            self._conn()
            .execute(
                f"UPDATE tasks SET {_CLAIM_SET} WHERE id = ? AND fence = ? "
                f"AND status IN ('pending', 'running') RETURNING {_TASK_COLUMNS}",
                (owner, to_iso(lease_until), stamp, stamp, task_id, expected_fence),
            )
            .fetchone()
        )
        return None if row is None else _task(row)

    def running_tasks(self, batch: str | None) -> list[TaskRecord]:
        if batch is None:
            sql = f"SELECT {_TASK_COLUMNS} FROM tasks WHERE status = 'running' ORDER BY pos"
            rows = self._conn().execute(sql).fetchall()
        else:
            sql = (
                f"SELECT {_TASK_COLUMNS} FROM tasks WHERE batch = ? AND status = 'running' "
                "ORDER BY pos"
            )
            rows = self._conn().execute(sql, (batch,)).fetchall()
        return [_task(r) for r in rows]

    @_serialized
    def renew_leases(self, owner: str, lease_until: datetime) -> int:
        cursor = self._conn().execute(
            "UPDATE tasks SET lease_expires_at = ? WHERE owner = ? AND status = 'running'",
            (to_iso(lease_until), owner),
        )
        return cursor.rowcount

    @_serialized
    def release_task(self, task_id: str, fence: int, now: datetime) -> bool:
        cursor = self._conn().execute(
            "UPDATE tasks SET status = 'pending', owner = NULL, lease_expires_at = NULL, "
            "updated_at = ? WHERE id = ? AND fence = ? AND status = 'running'",
            (to_iso(now), task_id, fence),
        )
        return cursor.rowcount == 1

    # -- the fenced write path ---------------------------------------------------
    def load_history(self, task_id: str) -> dict[int, StepRecord]:
        rows = self._conn().execute(
            f"SELECT {_STEP_COLUMNS} FROM steps WHERE task_id = ?", (task_id,)
        )
        return {row[1]: _step(row) for row in rows}

    @_serialized
    def record_step(self, step: StepRecord, fence: int, *, first: bool = False) -> bool:
        return self._record_step(self._conn(), step, fence, first=first)

    @staticmethod
    def _record_step(
        conn: sqlite3.Connection, step: StepRecord, fence: int, *, first: bool = False
    ) -> bool:
        params = (
            step.task_id,
            step.seq,
            step.kind,
            step.name,
            step.status,
            step.output,
            step.attempts,
            step.task_attempt,
            step.run_attempts,
            step.error,
            None if step.retry_at is None else to_iso(step.retry_at),
            to_iso(step.started_at),
            to_iso(step.finished_at),
            step.task_id,
            fence,
        )
        if first:
            try:
                return conn.execute(_INSERT_STEP, params).rowcount == 1
            except sqlite3.IntegrityError:
                pass  # the position was written after all: fall back to the upsert
        cursor = conn.execute(_RECORD_STEP, params)
        return cursor.rowcount == 1

    @_serialized
    def start_attempt(
        self, task_id: str, fence: int, attempts: int, error: str | None, now: datetime
    ) -> bool:
        cursor = self._conn().execute(
            "UPDATE tasks SET attempts = ?, error = COALESCE(?, error), updated_at = ? "
            "WHERE id = ? AND fence = ?",
            (attempts, error, to_iso(now), task_id, fence),
        )
        return cursor.rowcount == 1

    @_serialized
    def finish_task(
        self,
        task_id: str,
        fence: int,
        status: str,
        result: str | None,
        error: str | None,
        now: datetime,
    ) -> bool:
        stamp = to_iso(now)
        cursor = self._conn().execute(
            "UPDATE tasks SET status = ?, result = ?, error = ?, owner = NULL, "
            "lease_expires_at = NULL, finished_at = ?, updated_at = ? "
            "WHERE id = ? AND fence = ? AND status = 'running'",
            (status, result, error, stamp, stamp, task_id, fence),
        )
        return cursor.rowcount == 1

    # -- reading and operator actions ----------------------------------------------
    def get_task(self, task_id: str) -> TaskRecord | None:
        row = (
            self._conn()
            .execute(f"SELECT {_TASK_COLUMNS} FROM tasks WHERE id = ?", (task_id,))
            .fetchone()
        )
        return None if row is None else _task(row)

    def list_tasks(
        self, *, batch: str | None = None, status: str | None = None, limit: int | None = None
    ) -> Iterator[TaskRecord]:
        where: list[str] = []
        params: list[Any] = []
        if batch is not None:
            where.append("batch = ?")
            params.append(batch)
        if status is not None:
            where.append("status = ?")
            params.append(status)
        sql = f"SELECT {_TASK_COLUMNS} FROM tasks"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY pos"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        # A connection of its own, so a caller may write while iterating.
        conn = self._connect()
        try:
            for row in conn.execute(sql, params):
                yield _task(row)
        finally:
            conn.close()
            with self._all_lock:
                self._all.remove(conn)

    def batch_summaries(self, name: str | None = None) -> list[BatchSummary]:
        sql = (
            "SELECT b.name, b.task_name, b.created_at, t.status, COUNT(t.id), "
            "MIN(t.started_at), MAX(t.finished_at) FROM batches b "
            "LEFT JOIN tasks t ON t.batch = b.name"
        )
        params: tuple[Any, ...] = ()
        if name is not None:
            sql += " WHERE b.name = ?"
            params = (name,)
        sql += " GROUP BY b.name, t.status ORDER BY b.created_at, b.name"
        summaries: dict[str, BatchSummary] = {}
        for row in self._conn().execute(sql, params):
            summary = summaries.get(row[0])
            if summary is None:
                summary = BatchSummary(row[0], row[1], from_iso(row[2]), {}, None, None)
            started = min(filter(None, [summary.first_started_at, _opt_time(row[5])]), default=None)
            finished = max(
                filter(None, [summary.last_finished_at, _opt_time(row[6])]), default=None
            )
            counts = dict(summary.counts)
            if row[3] is not None:
                counts[row[3]] = row[4]
            summaries[row[0]] = BatchSummary(
                summary.name, summary.task_name, summary.created_at, counts, started, finished
            )
        return list(summaries.values())

    def batch_task_name(self, batch: str) -> str | None:
        row = (
            self._conn()
            .execute("SELECT task_name FROM batches WHERE name = ?", (batch,))
            .fetchone()
        )
        return None if row is None else str(row[0])

    def close_thread(self) -> None:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            self._local.conn = None
            with self._all_lock:
                self._all.remove(conn)
            conn.close()

    def batch_counts(self, batch: str) -> Mapping[str, int]:
        rows = self._conn().execute(
            "SELECT status, COUNT(*) FROM tasks WHERE batch = ? GROUP BY status", (batch,)
        )
        return dict(rows.fetchall())

    @_serialized
    def cancel_task(self, task_id: str, now: datetime) -> bool:
        stamp = to_iso(now)
        # The fence moves too, so a running owner's next write fails and it stops.
        cursor = self._conn().execute(
            "UPDATE tasks SET status = 'cancelled', fence = fence + 1, owner = NULL, "
            "lease_expires_at = NULL, finished_at = ?, updated_at = ? "
            "WHERE id = ? AND status IN ('pending', 'running')",
            (stamp, stamp, task_id),
        )
        return cursor.rowcount == 1

    @_serialized
    def retry_task(self, task_id: str, now: datetime) -> bool:
        cursor = self._conn().execute(
            "UPDATE tasks SET status = 'pending', retry_base = attempts, result = NULL, "
            "finished_at = NULL, updated_at = ? "
            "WHERE id = ? AND status IN ('failed', 'cancelled')",
            (to_iso(now), task_id),
        )
        return cursor.rowcount == 1

    # -- operations ----------------------------------------------------------------
    @_serialized
    def claim_operation(
        self, scope: str, key: str, task_id: str, seq: int, fence: int, now: datetime
    ) -> OperationClaim:
        return sqlite_ops.claim(self._conn(), scope, key, task_id, seq, fence, now)

    @_serialized
    def reclaim_operation(
        self,
        scope: str,
        key: str,
        expected_calls: int,
        task_id: str,
        seq: int,
        fence: int,
        now: datetime,
    ) -> OperationClaim:
        return sqlite_ops.reclaim(
            self._conn(), scope, key, expected_calls, task_id, seq, fence, now
        )

    @_serialized
    def complete_operation(
        self, scope: str, key: str, calls: int, result: str, step: StepRecord, fence: int
    ) -> tuple[bool, bool]:
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            op_recorded = sqlite_ops.settle(
                conn,
                scope,
                key,
                calls,
                "completed",
                result=result,
                error=None,
                permanent=False,
                now=step.finished_at,
            )
            step_recorded = op_recorded and self._record_step(conn, step, fence)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return op_recorded, step_recorded

    @_serialized
    def settle_operation(
        self,
        scope: str,
        key: str,
        calls: int,
        status: str,
        *,
        error: str | None,
        permanent: bool,
        now: datetime,
        result: str | None = None,
    ) -> bool:
        return sqlite_ops.settle(
            self._conn(),
            scope,
            key,
            calls,
            status,
            result=result,
            error=error,
            permanent=permanent,
            now=now,
        )

    @_serialized
    def resolve_operation(
        self,
        scope: str,
        key: str,
        status: str,
        *,
        result: str | None,
        permanent: bool,
        now: datetime,
    ) -> bool:
        return sqlite_ops.resolve(
            self._conn(), scope, key, status, result=result, permanent=permanent, now=now
        )

    def get_operation(self, scope: str, key: str) -> OperationRecord | None:
        return sqlite_ops.get(self._conn(), scope, key)

    def list_operations(
        self,
        *,
        prefix: str | None = None,
        since: datetime | None = None,
        task_id: str | None = None,
        statuses: tuple[str, ...] | None = None,
        limit: int | None = None,
    ) -> Iterator[OperationRecord]:
        conn = self._connect()
        try:
            yield from sqlite_ops.listing(
                conn,
                prefix=prefix,
                since=since,
                task_id=task_id,
                statuses=statuses,
                limit=limit,
            )
        finally:
            conn.close()
            with self._all_lock:
                self._all.remove(conn)

    def operation_call_counts(self) -> tuple[int, int]:
        return sqlite_ops.call_counts(self._conn())
