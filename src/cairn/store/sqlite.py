"""The embedded store: one SQLite file in WAL mode.

Choices that matter for durability and speed:

* WAL with ``synchronous=NORMAL`` by default survives a killed process;
  ``synchronous="FULL"`` also survives power loss.
* Each thread gets its own connection in autocommit mode; multi-statement
  writes use ``BEGIN IMMEDIATE`` so they never deadlock on lock upgrades. A
  thread's connection is closed when the thread ends (or calls
  ``close_thread``): short-lived threads, and the group-commit thread that
  comes and goes, leave no connection open behind them.
* A process's writers queue on one Python lock, handed over at once, instead of
  on SQLite's busy handler, which sleeps in steps of milliseconds. That keeps a
  step's work-to-commit window short under concurrency, and that window is the
  only place a crash makes a step run twice.
* The per-step write is one statement: ``INSERT … SELECT … WHERE EXISTS`` the
  task row with our fence. One implicit transaction, one commit, and a row
  count of 0 means the fence moved (lease lost or task cancelled).
* Opening a file checks it first, so a file that is not a cairn store, or one
  written by a newer cairn, is reported and left byte-for-byte unchanged.
* A file that cannot be written (a read-only file, directory or mount) is
  opened read-only, so every reading API works on it; it is never migrated,
  and a write raises ``StoreReadOnly`` (``cairn.store.sqlitefile``).
* Every driver error (locked past the busy timeout, a full disk, an I/O
  error, a damaged file) becomes a ``StoreError`` naming the file and saying
  what to do, chained ``from`` the driver's (``cairn.store.driver_errors``).

The SQL itself is shared with every SQL backend: see ``cairn.store.sqlbase``.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, NoReturn, TypeVar
from zlib import crc32

from cairn.clock import to_iso
from cairn.errors import NotACairnStore, SchemaTooNew, StoreError, StoreReadOnly
from cairn.store import sql
from cairn.store.capabilities import Capabilities
from cairn.store.driver_errors import sqlite_busy, sqlite_error, undecodable, unstorable_text
from cairn.store.migrate import latest_version, migrations
from cairn.store.records import StepRecord
from cairn.store.sqlbase import SQLStore
from cairn.store.sqlcore import STREAM_PAGE, Result, Tx
from cairn.store.sqlitefile import Access, access_of, connect, prepare_new

Synchronous = Literal["NORMAL", "FULL"]
T = TypeVar("T")

_SQLITE_MAGIC = b"SQLite format 3\x00"

# This backend's own statements: opening, transactions and the schema version.
# (The store's SQL is shared with every SQL backend: cairn.store.sql.)
_TABLES = "SELECT name FROM sqlite_master WHERE type='table'"
_HAS_META = "SELECT 1 FROM sqlite_master WHERE type='table' AND name='cairn_meta'"
_VERSION = "SELECT value FROM cairn_meta WHERE key = 'schema_version'"
_SET_VERSION = (
    "INSERT INTO cairn_meta (key, value) VALUES ('schema_version', ?) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)
_BUSY_TIMEOUT = "PRAGMA busy_timeout = {ms:d}"
_SYNCHRONOUS = "PRAGMA synchronous = {mode}"
_JOURNAL_MODE = "PRAGMA journal_mode"
_WAL = "PRAGMA journal_mode = WAL"
_BEGIN_WRITE = "BEGIN IMMEDIATE"  # takes the write lock now: no deadlock on upgrading
_BEGIN_READ = "BEGIN"
_COMMIT = "COMMIT"
_ROLLBACK = "ROLLBACK"


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


def inspect_file(path: Path, access: Access | None = None) -> int:
    """The cairn schema version of ``path`` (0 for a new or empty database).

    Reads only. Raises ``NotACairnStore`` or ``SchemaTooNew`` without touching it;
    ``access`` is how the file can be opened (found here if not given).
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
    access = access or access_of(path)
    # Where it can be written, a read-write connection that only reads: a
    # read-only one cannot remove the -wal/-shm files it creates for a WAL
    # database, and would leave them beside a file we are refusing.
    try:
        conn = connect(path, access, timeout=5.0)
        try:
            tables = {r[0] for r in conn.execute(_TABLES)}
            row = None
            if "cairn_meta" in tables:
                row = conn.execute(_VERSION).fetchone()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise sqlite_error(exc, path, access.why, 5.0) from exc
    if not tables:
        return 0
    if "cairn_meta" not in tables:
        raise NotACairnStore(
            f"{path} is a SQLite database of something else (tables: "
            f"{', '.join(sorted(tables)[:5])}). cairn will not write into it; give "
            "cairn a path of its own. The file was not changed."
        )
    version = int(row[0]) if row else 0
    if version > latest_version("sqlite"):
        raise SchemaTooNew(
            f"{path} was written by a newer cairn (schema {version}; this cairn knows up "
            f"to {latest_version('sqlite')}). Upgrade cairn (`pip install -U cairn-durable`) to "
            "use it. The file was not changed."
        )
    return version


class _SQLiteTx:
    """Statements inside one ``BEGIN IMMEDIATE`` transaction."""

    def __init__(self, store: SQLiteStore, conn: sqlite3.Connection) -> None:
        self._store = store
        self._conn = conn

    def exec(self, statement: str, params: Sequence[Any] = ()) -> Result:
        try:
            cursor = self._conn.execute(statement, params)
            return Result(cursor.rowcount, cursor.fetchall() if cursor.description else [])
        except sqlite3.Error as exc:
            self._store._failed(exc)
        except UnicodeEncodeError as exc:
            raise unstorable_text(exc) from exc

    def exec_many(self, statement: str, rows: Iterable[Sequence[Any]]) -> int:
        before = self._conn.total_changes
        try:
            self._conn.executemany(statement, rows)
        except sqlite3.Error as exc:
            self._store._failed(exc)
        except UnicodeEncodeError as exc:
            raise unstorable_text(exc) from exc
        return self._conn.total_changes - before

    def stream(self, statement: str, params: Sequence[Any] = ()) -> Iterator[tuple[Any, ...]]:
        # SQLite steps through the result as it is fetched: only a page is held.
        try:
            cursor = self._conn.execute(statement, params)
            while page := cursor.fetchmany(STREAM_PAGE):
                yield from page
        except sqlite3.Error as exc:
            self._store._failed(exc)


class SQLiteStore(SQLStore):
    """A cairn store in one SQLite file."""

    capabilities = Capabilities(multi_host=False, multi_process=True, file_based=True)

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
        self.identity = f"sqlite:{self.path.resolve()}"
        self.synchronous = synchronous
        self._busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        self._write_lock = threading.RLock()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        self._access = access_of(self.path)
        # True when the file cannot be written: every read works, every write
        # raises StoreReadOnly.
        self.read_only = self._access.read_only
        version = inspect_file(self.path, self._access)
        self.schema_version = latest_version("sqlite")
        # The schema version the file held when this store opened it (0: created
        # now); read again under the write lock if a migration runs.
        self.found_schema = version
        if not self.path.exists():
            prepare_new(self.path)
        self._migrate(version)

    # -- connections -----------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            # The thread's own holder: it goes with the thread's local data when
            # the thread ends, and its finalizer closes the connection then.
            holder = _ThreadEnd()
            self._local.holder = holder
            closing = weakref.finalize(holder, _forget, self._all, self._all_lock, conn)
            # At interpreter exit a daemon thread may still be using it: the
            # process's end closes it then, as before.
            closing.atexit = False
            holder.closing = closing
        return conn

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = connect(self.path, self._access, timeout=self._busy_timeout_ms / 1000)
        except sqlite3.Error as exc:
            self._failed(exc)
        try:
            conn.execute(_BUSY_TIMEOUT.format(ms=int(self._busy_timeout_ms)))
            if not self.read_only:
                self._ensure_wal(conn)
                conn.execute(_SYNCHRONOUS.format(mode=self.synchronous))
        except sqlite3.Error as exc:
            conn.close()
            self._failed(exc)
        with self._all_lock:
            self._all.append(conn)
        return conn

    def _ensure_wal(self, conn: sqlite3.Connection) -> None:
        """Switch the file to WAL (it stays so). Changing the journal mode takes a
        lock the busy timeout does not wait for, so two processes opening a new
        file at once retry here instead of failing."""
        deadline = time.monotonic() + self._busy_timeout_ms / 1000
        while conn.execute(_JOURNAL_MODE).fetchone()[0] != "wal":
            try:
                conn.execute(_WAL)
            except sqlite3.OperationalError as exc:
                if not sqlite_busy(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _failed(self, exc: sqlite3.Error) -> NoReturn:
        """Raise the cairn error ``exc`` means for this file."""
        busy_seconds = self._busy_timeout_ms / 1000
        raise sqlite_error(exc, self.path, self._access.why, busy_seconds) from exc

    def close(self) -> None:
        with self._all_lock:
            for conn in self._all:
                with contextlib.suppress(sqlite3.ProgrammingError):
                    conn.close()  # may already be closed from its own thread
            self._all.clear()
        self._local = threading.local()

    def _migrate(self, found: int) -> None:
        latest = latest_version("sqlite")
        if found != latest and self.read_only:
            what = (
                "is not a cairn store yet"
                if found == 0
                else f"holds a cairn store of schema {found}, which this cairn (schema "
                f"{latest}) must upgrade before it can use it"
            )
            raise StoreReadOnly(
                f"{self.path} {what}, but it is read-only: {self._access.why}. cairn "
                "cannot write it. Make it writable once (any cairn command then upgrades "
                "it), or read it with the cairn version that wrote it. Nothing was changed."
            )
        conn = self._conn()
        if found == latest:
            return
        try:
            conn.execute(_BEGIN_WRITE)
            try:
                self._migrate_locked(conn, found)
                conn.execute(_COMMIT)
            except BaseException:
                _rollback(conn)
                raise
        except sqlite3.Error as exc:
            self._failed(exc)

    def _migrate_locked(self, conn: sqlite3.Connection, found: int) -> None:
        # Read again under the write lock: another process may have migrated.
        current = found
        if conn.execute(_HAS_META).fetchone():
            row = conn.execute(_VERSION).fetchone()
            current = int(row[0]) if row else 0
        self.found_schema = current
        for migration in migrations("sqlite")[current:]:
            for statement in _statements(migration.sql):
                conn.execute(statement)
            conn.execute(_SET_VERSION, (str(migration.version),))

    # -- the primitives the shared store is built on ------------------------------
    def _exec(self, statement: str, params: Sequence[Any] = (), *, patient: bool = True) -> Result:
        # ``patient`` changes nothing here: a local file has no connection to lose.
        # A try block costs nothing until it catches (CPython 3.11+).
        try:
            cursor = self._conn().execute(statement, params)
            return Result(cursor.rowcount, cursor.fetchall() if cursor.description else [])
        except sqlite3.Error as exc:
            self._failed(exc)
        except UnicodeEncodeError as exc:
            raise unstorable_text(exc) from exc

    def load_history(self, task_id: str) -> dict[int, StepRecord]:
        try:
            return super().load_history(task_id)
        except StoreError as exc:
            if not undecodable(exc.__cause__ or exc):
                raise
            return self._damaged_history(task_id, exc)

    def _damaged_history(self, task_id: str, exc: StoreError) -> NoReturn:
        """The history holds bytes that are not UTF-8 (written over the file):
        read it again with those bytes kept as escapes, so the entry that holds
        them fails its checksum and is reported with its position
        (``RecordCorrupt``); one without a checksum (written before schema 6)
        leaves the store's own error."""
        conn = self._conn()
        conn.text_factory = lambda raw: raw.decode("utf-8", "surrogateescape")
        try:
            sql.history_of(
                task_id,
                conn.execute(sql.LOAD_OP_HISTORY, (task_id,)).fetchall(),
                conn.execute(sql.LOAD_HISTORY, (task_id,)).fetchall(),
            )
        finally:
            conn.text_factory = str
        raise exc

    def _atomically(self, work: Callable[[Tx], T]) -> T:
        # A read-only store reads in a plain (deferred) transaction: one snapshot,
        # no write lock asked for; a write inside it raises StoreReadOnly.
        return self._transaction(_BEGIN_READ if self.read_only else _BEGIN_WRITE, work)

    def _snapshot(self, work: Callable[[Tx], T]) -> T:
        # A deferred transaction in WAL mode reads one snapshot from its first
        # read to its end, and takes no write lock: the batch writes on.
        return self._transaction(_BEGIN_READ, work)

    def _transaction(self, begin: str, work: Callable[[Tx], T]) -> T:
        conn = self._conn()
        try:
            conn.execute(begin)
        except sqlite3.Error as exc:
            self._failed(exc)
        try:
            result = work(_SQLiteTx(self, conn))
        except BaseException:
            _rollback(conn)
            raise
        try:
            conn.execute(_COMMIT)
        except sqlite3.Error as exc:
            _rollback(conn)
            self._failed(exc)
        return result

    def record_step(self, step: StepRecord, fence: int, *, first: bool = False) -> bool:
        # The per-step write, straight to this thread's connection: the shared
        # version's wrappers cost a few microseconds a step, measurable here;
        # and a step's first run calls nothing of cairn's outside this file.
        # The clean first write (a call that returned: nearly every step) has
        # its parameters built right here (_step_insert, inline: a Python call
        # costs more than the tuple).
        if (
            first
            and step.error is None
            and step.retry_at is None
            and not step.deferred
            and step.kept is None
        ):
            insert: str | None = sql.INSERT_CLEAN_STEP
            task_id, kind, name, output = step.task_id, step.kind, step.name, step.output
            params: tuple[Any, ...] = (
                task_id, step.seq, kind, name, step.status, output,
                step.attempts, step.task_attempt, step.run_attempts,
                _stamp(step.started_at), _stamp(step.finished_at), step.fingerprint,
                # sql.entry_checksum, inline: a call costs more than the CRC here.
                crc32(f"{kind}\0{name}\0{output}".encode("utf-8", "surrogatepass")),
                task_id, fence,
            )  # fmt: skip
        elif first:
            insert, params = sql.INSERT_STEP, _step_params(step, fence)
        else:
            insert = None
            params = _step_params(step, fence)
        with self._write_lock:
            # _conn, inline: this thread's connection, made on its first use.
            conn = getattr(self._local, "conn", None) or self._conn()
            try:
                if insert is not None:
                    try:
                        return conn.execute(insert, params).rowcount == 1
                    except sqlite3.IntegrityError:
                        pass  # the position was written after all: fall back to the upsert
                    params = _step_params(step, fence)
                return conn.execute(sql.UPSERT_STEP, params).rowcount == 1
            except sqlite3.Error as exc:
                self._failed(exc)
            except UnicodeEncodeError as exc:
                raise unstorable_text(exc) from exc

    look_before_writing = True

    def _pending_index(self, batch: str | None) -> str:
        # Without it SQLite's planner prefers the (status) index, which also
        # seeks to the pending rows, but nothing would keep it from drifting;
        # INDEXED BY makes a plan that walks other rows an error instead.
        return (
            " INDEXED BY tasks_pending_by_batch"
            if batch is not None
            else " INDEXED BY tasks_pending"
        )

    def _fair_indexes(self) -> tuple[str, str]:
        return " INDEXED BY tasks_pending_fair", " INDEXED BY tasks_pending"

    def _ts(self, moment: datetime) -> str:
        return to_iso(moment)

    def _writing(self) -> threading.RLock:
        return self._write_lock

    def close_thread(self) -> None:
        holder: _ThreadEnd | None = getattr(self._local, "holder", None)
        if holder is not None:
            self._local.conn = None
            self._local.holder = None
            holder.closing()


class _ThreadEnd:
    """Kept in a thread's local data beside its connection: when the thread
    ends, its local data is dropped, and ``closing`` (a finalizer) closes the
    connection."""

    closing: weakref.finalize[Any, Any]


def _forget(
    all_conns: list[sqlite3.Connection], lock: threading.Lock, conn: sqlite3.Connection
) -> None:
    """Close a thread's connection (its thread ended, or asked) and forget it."""
    with lock:
        if conn not in all_conns:
            return  # close() closed every connection already, this one too
        all_conns.remove(conn)
    with contextlib.suppress(sqlite3.Error):
        conn.close()


def _rollback(conn: sqlite3.Connection) -> None:
    """Roll back if a transaction is still open: SQLite has already rolled it back
    after some errors (a full disk, an I/O error), and a second ROLLBACK would hide
    the error that matters."""
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute(_ROLLBACK)


# The clock's times as text: to_iso itself, named for the step write's params.
_stamp = to_iso


def _step_params(step: StepRecord, fence: int) -> tuple[Any, ...]:
    """``SQLStore._step_params``, with its timestamps written inline."""
    retry_at = step.retry_at
    return (
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
        None if retry_at is None else _stamp(retry_at),
        _stamp(step.started_at),
        _stamp(step.finished_at),
        step.deferred,
        step.fingerprint,
        step.kept,
        sql.entry_checksum(step.kind, step.name, step.output),
        step.task_id,
        fence,
    )


def _step_insert(step: StepRecord, fence: int) -> tuple[str, tuple[Any, ...]]:
    """A step's first write and its parameters: the clean insert for a call that
    returned, else the full one (a batch's writes, store.stepbatch; the lone
    write in ``record_step`` builds the same inline)."""
    if (
        step.error is not None
        or step.retry_at is not None
        or step.deferred
        or step.kept is not None
    ):
        return sql.INSERT_STEP, _step_params(step, fence)
    return sql.INSERT_CLEAN_STEP, (
        step.task_id,
        step.seq,
        step.kind,
        step.name,
        step.status,
        step.output,
        step.attempts,
        step.task_attempt,
        step.run_attempts,
        _stamp(step.started_at),
        _stamp(step.finished_at),
        step.fingerprint,
        sql.entry_checksum(step.kind, step.name, step.output),
        step.task_id,
        fence,
    )
