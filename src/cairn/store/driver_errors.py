"""What the database drivers' errors mean, as cairn's errors: the one place they
are translated.

Every backend passes each driver error it catches through here, so no
``sqlite3`` or ``psycopg`` exception leaves a store method, and every one that
does leave is a ``StoreError`` (chained ``from`` the driver's) that names the
store and says what to do. The engine spends no task attempt on a
``StoreError``: the store failed, not the task.

SQLite (``sqlite_error``) is read by its result codes: busy or locked past the
busy timeout is ``StoreUnavailable``; read-only is ``StoreReadOnly``; a full
disk, an I/O error, a damaged file or one that cannot be opened is a
``StoreError`` saying how to recover. PostgreSQL (``postgres_refused``) is read
by SQLSTATE: a read-only server is ``StoreReadOnly``, a value too long for an
index or holding a NUL, a missing privilege or a cancelled statement is a
``StoreError`` with advice; a lost connection is retried by the pool
(``cairn.store.pgpool``) and becomes ``StoreUnavailable`` (``postgres_lost``)
when it gives up. On both, a row whose key is already there is ``DuplicateRow``,
which the shared store catches where a retried write may meet its own row.

Text the driver cannot encode (a lone surrogate) is a ``CodecError``
(``unstorable_text``): the value is wrong, not the store.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from cairn.errors import CodecError, StoreError, StoreReadOnly, StoreUnavailable

__all__ = [
    "DuplicateRow",
    "one_line",
    "postgres_closed",
    "postgres_connect_failed",
    "postgres_lost",
    "postgres_refused",
    "sqlite_busy",
    "sqlite_error",
    "statement_target",
    "undecodable",
    "unstorable_text",
]


class DuplicateRow(StoreError):
    """The store refused a row whose key is already there (a unique violation).
    The shared store catches it where a retried write may meet its own row."""


def unstorable_text(exc: UnicodeEncodeError) -> CodecError:
    """The error for text the driver could not encode: a lone surrogate that got
    past the codec and the name checks (an error message, a step name, a
    command-line argument that is not UTF-8)."""
    text = exc.object
    bad = text[exc.start : exc.end]
    start = max(0, exc.start - 20)
    return CodecError(
        f"the store cannot take text holding a lone surrogate ({bad!r} at position "
        f"{exc.start} of {len(text)} characters, around {text[start : exc.start + 20]!r}): "
        "it is not valid Unicode. Nothing was written. Such text usually comes from "
        "bytes decoded with errors='surrogateescape' (a file name, or a command-line "
        "argument that is not UTF-8); clean it first, e.g. "
        "text.encode('utf-8', 'replace').decode('utf-8')."
    )


# -- SQLite ------------------------------------------------------------------------

# Primary result codes (sqlite3.h).
_PERM, _BUSY, _LOCKED, _NOMEM, _READONLY, _IOERR, _CORRUPT = 3, 5, 6, 7, 8, 10, 11
_FULL, _CANTOPEN, _PROTOCOL, _CONSTRAINT, _AUTH, _NOTADB = 13, 14, 15, 19, 23, 26
# Extended codes of a constraint that says "this key is already there".
_DUPLICATE = frozenset({1555, 2067})  # SQLITE_CONSTRAINT_PRIMARYKEY, _UNIQUE


def undecodable(exc: BaseException) -> bool:
    """True if ``exc`` is the SQLite driver failing to read stored text as UTF-8:
    bytes written over the file, never text cairn wrote."""
    return isinstance(exc, sqlite3.OperationalError) and "Could not decode to UTF-8" in str(exc)


def sqlite_busy(exc: sqlite3.Error) -> bool:
    """True if ``exc`` is SQLite saying another connection holds a lock."""
    return getattr(exc, "sqlite_errorcode", 0) & 0xFF in (_BUSY, _LOCKED)


def sqlite_error(exc: sqlite3.Error, path: Path, why: str, busy_seconds: float) -> StoreError:
    """The cairn error ``exc`` means for the SQLite store at ``path``; ``why`` says
    why the file cannot be written, when it cannot."""
    code = getattr(exc, "sqlite_errorcode", None)
    said = f"SQLite: {exc}"
    if code is None:
        if undecodable(exc):
            return StoreError(
                f"the SQLite store {path} holds text that is not valid UTF-8 ({said}): cairn "
                "writes only UTF-8, so the file was changed on disk or is damaged. Restore "
                "it from a backup (`cairn backup` makes one), or recover what SQLite can "
                f"still read: sqlite3 {path} .recover | sqlite3 recovered.db."
            )
        # Raised by the driver itself, not by SQLite (a value it cannot bind, a
        # closed connection): cairn asked for something the driver refuses.
        return StoreError(f"the SQLite driver refused a statement on the store {path} ({said}).")
    return _sqlite_coded(exc, code & 0xFF, path, why, busy_seconds) or StoreError(
        f"SQLite refused a statement on the store {path} ({said}, "
        f"{exc.sqlite_errorname}). Nothing was written by this statement."
    )


def _sqlite_coded(
    exc: sqlite3.Error, primary: int, path: Path, why: str, busy_seconds: float
) -> StoreError | None:
    """The error for the result codes that mean something about the file."""
    said = f"SQLite: {exc}"
    if primary in (_BUSY, _LOCKED, _PROTOCOL):
        return StoreUnavailable(
            f"the SQLite store {path} stayed locked for {busy_seconds:g}s ({said}): another "
            "process holds its write lock (a long transaction, a backup or sqlite3 shell, "
            "or a process that is stuck or paused). Nothing recorded was lost. Let that "
            "process finish or stop it, then run again: every task resumes from its last "
            "checkpoint."
        )
    if primary == _FULL:
        return StoreError(
            f"the disk holding the SQLite store {path} is full ({said}). This write was not "
            "made; nothing recorded before it was lost. Free space, then run again: every "
            "task resumes from its last checkpoint."
        )
    if primary == _READONLY:
        why = why or "the file, its directory or its file system cannot be written"
        return StoreReadOnly(
            f"the SQLite store {path} is read-only: {why}. It can be read but not "
            "written, and nothing was written. Reading works (cairn batches, tasks, show, ops, "
            "metrics, export, and the store's reading API). To run or change tasks, make it "
            "writable, or copy the store (with its -wal file, if any) somewhere writable."
        )
    if primary in (_CORRUPT, _NOTADB):
        return StoreError(
            f"the SQLite store {path} is damaged ({said}); cairn wrote nothing more to it. "
            "Restore it from a backup (`cairn backup` makes one), or recover what SQLite "
            f"can still read: sqlite3 {path} .recover | sqlite3 recovered.db, then use "
            "the recovered file as the store."
        )
    if primary == _IOERR:
        return StoreError(
            f"a disk I/O error on the SQLite store {path} ({said}, {exc.sqlite_errorname}). "
            "Nothing recorded before was lost. Check the disk and the file system (a full "
            "disk, a failing device, a network file system that dropped), then run again: "
            "every task resumes from its last checkpoint."
        )
    if primary == _CANTOPEN:
        return StoreError(
            f"cannot open the SQLite store {path} ({said}). Check that it is a file, and "
            "that you may read it and its directory."
        )
    if primary in (_PERM, _AUTH):
        return StoreError(f"SQLite was refused access to the store {path} ({said}).")
    if primary == _NOMEM:
        return StoreError(f"SQLite ran out of memory using the store {path} ({said}).")
    if primary == _CONSTRAINT and exc.sqlite_errorcode in _DUPLICATE:
        return DuplicateRow(f"SQLite refused a row of the store {path} ({said}).")
    return None


# -- PostgreSQL --------------------------------------------------------------------


def one_line(exc: BaseException) -> str:
    """The error's message on one line (libpq's span several)."""
    return " ".join(str(exc).split()) or type(exc).__name__


_TARGET = re.compile(
    r"^\s*(?:(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+(\w+)|SELECT\b.*?\bFROM\s+(\w+))",
    re.IGNORECASE | re.DOTALL,
)


def statement_target(statement: str) -> str:
    """What a statement was doing, in words: "a write to tasks", "a read of steps"."""
    found = _TARGET.match(statement)
    if found is None:
        return "a statement"
    verb, table, read = found.groups()
    if read is not None:
        return f"a read of {read}"
    kind = {"INSERT": "a write to", "UPDATE": "an update of", "DELETE": "a delete from"}
    return f"{kind[verb.split()[0].upper()]} {table}"


def postgres_refused(
    exc: Exception, what: str, *, where: str, schema: str, user: str, data_error: bool
) -> StoreError:
    """The error to raise for ``what`` the server (or driver) refused at
    ``where``: what was refused, why, and what to do about it. ``data_error``:
    ``exc`` is the driver's ``DataError`` (it refuses a NUL in text itself,
    before the server sees it, and gives no SQLSTATE)."""
    # The server's own words, without its DETAIL and HINT (which suggest
    # changing cairn's indexes, say).
    diag = getattr(exc, "diag", None)
    cause = getattr(diag, "message_primary", None) or one_line(exc)
    state = getattr(exc, "sqlstate", None) or ("22000" if data_error else "")
    if state == "23505":
        return DuplicateRow(f"PostgreSQL refused {what}: {cause}")
    if state == "25006":
        return StoreReadOnly(
            f"PostgreSQL at {where} is read-only, so it refused "
            f"{what}: {cause}. Point the store URL at the primary server (a standby, "
            "or a database with default_transaction_read_only=on, cannot be written); "
            "reading commands such as `cairn tasks` work on a standby."
        )
    advice = _advice(state, cause, schema, user)
    return StoreError(f"PostgreSQL refused {what}: {cause}. {advice}")


def _advice(state: str, cause: str, schema: str, user: str) -> str:
    """What to do about a statement refused with SQLSTATE ``state``."""
    if state.startswith("54"):  # program_limit_exceeded: an index row too large
        return (
            "A value cairn indexes (a task id, item key, batch or task name, operation "
            "key, signal or conversation name) is too long for a PostgreSQL index, which "
            "holds at most about 2,700 bytes. Shorten it, or replace the long part with a "
            "hash (cairn.op_key does that for operation keys). Nothing was written by this "
            "statement."
        )
    if state.startswith("22") and "NUL" in cause:
        return (
            "A task id, key or name holds a NUL character (\\x00), which PostgreSQL text "
            "cannot store: remove it (values a step returns are encoded, and may hold "
            "any character). Nothing was written by this statement."
        )
    if state.startswith("22"):
        return "A value is out of range or malformed. Nothing was written by this statement."
    if state == "42501":  # insufficient_privilege
        return (
            f"User {user!r} lacks rights on schema {schema}: run cairn as the user that "
            f"ran `cairn migrate`, or grant them: GRANT USAGE ON SCHEMA {schema} TO {user}; "
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO "
            f"{user}; GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema} TO {user}."
        )
    if state == "57014":  # query_canceled
        return (
            "A statement_timeout set for this user or database, or an operator's "
            "pg_cancel_backend, stopped it; cairn's statements are short, so look for a "
            "lock held elsewhere."
        )
    return f"(SQLSTATE {state or 'none'}; cairn does not retry it.)"


def postgres_connect_failed(where: str, exc: BaseException) -> StoreError:
    """The first connection of a new store could not be opened."""
    return StoreError(
        f"cannot connect to PostgreSQL at {where}: {one_line(exc)}. "
        "Check that the server is running and that the URL names a database "
        "that exists and a user that may connect."
    )


def postgres_lost(
    where: str, cause: BaseException, *, after: float | None = None
) -> StoreUnavailable:
    """The server could not be reached (again), at once or for ``after`` seconds."""
    if after is None:
        return StoreUnavailable(f"lost PostgreSQL at {where}: {one_line(cause)}")
    return StoreUnavailable(
        f"lost PostgreSQL at {where} for more than {after:g}s: {one_line(cause)}"
    )


def postgres_closed(where: str) -> StoreError:
    """A call on a store (a pool) that was closed."""
    return StoreError(f"the PostgreSQL store at {where} is closed")
