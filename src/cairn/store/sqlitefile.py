"""What a SQLite store file allows, and what its driver's errors mean.

Opening
-------
``access_of`` looks at a store file without writing anything and says how to
open it:

* ``rw``: the file can be written, and so can its directory (SQLite creates the
  ``-wal`` and ``-shm`` files beside a WAL database), or those two files exist
  and can be written.
* ``ro`` (``file:…?mode=ro``): it cannot be written (a read-only file, a
  read-only directory, a read-only mount), but SQLite can still use the WAL
  index: the ``-shm`` file exists (SQLite reads it read-only), its directory
  allows creating it, or the file is not in WAL mode. Reads see every committed
  transaction, including those still in the ``-wal`` file, and stay
  consistent while another process writes.
* ``immutable`` (``file:…?mode=ro&immutable=1``): a WAL file whose ``-shm``
  neither exists nor can be created. SQLite then reads the main file alone,
  takes no locks and ignores any ``-wal``. That is safe only because of when
  cairn uses it: the ``-shm`` is missing, so no process has the store open
  (every WAL connection keeps one), and there is no ``-wal`` with content, so
  every committed transaction is in the main file. What it cannot guard
  against is a process with more rights (another user) starting to write the
  store while it is being read: reads may then miss those writes. On a
  read-only mount, or a copy nobody writes, that cannot happen. A ``-wal``
  with content and no way to create the ``-shm`` is refused (``StoreReadOnly``
  saying how to read it), since reading the main file alone would show an
  older state of the store without saying so.

A read-only store migrates nothing: one that would need a migration is refused
with ``StoreReadOnly``, and any write is refused by SQLite and reported as
``StoreReadOnly``.

Errors
------
``store_error`` turns SQLite's result codes into cairn errors that name the
file and say what to do: busy or locked past the busy timeout is
``StoreUnavailable``; read-only is ``StoreReadOnly``; a full disk, an I/O
error, a damaged file or one that cannot be opened is ``StoreError``. Every one
is a ``StoreError``, so the engine spends no attempt on it. Constraint
violations (the store's own logic) and errors in cairn's SQL are not
translated.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cairn.errors import CodecError, StoreError, StoreReadOnly, StoreUnavailable

__all__ = [
    "Access",
    "access_of",
    "connect",
    "connect_reader",
    "prepare_new",
    "store_error",
    "unstorable_text",
]

Mode = Literal["rw", "ro", "immutable"]

# Byte 18 of a SQLite file's header: 2 when the file is in WAL mode.
_WAL_VERSION_OFFSET = 18

# Primary result codes (sqlite3.h).
_PERM, _BUSY, _LOCKED, _NOMEM, _READONLY, _IOERR, _CORRUPT = 3, 5, 6, 7, 8, 10, 11
_FULL, _CANTOPEN, _PROTOCOL, _AUTH, _NOTADB = 13, 14, 15, 23, 26


@dataclass(frozen=True)
class Access:
    """How a store file can be opened; ``why`` says why it cannot be written."""

    mode: Mode = "rw"
    why: str = ""

    @property
    def read_only(self) -> bool:
        return self.mode != "rw"


def _sidecar(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK)


def _read_only_mount(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _why_read_only(path: Path) -> str:
    """Why ``path`` (an existing store file) cannot be written; "" if it can."""
    folder = path.absolute().parent
    if _read_only_mount(path):
        return f"the file system holding {folder} is mounted read-only"
    if not _writable(path):
        return "the file itself is not writable, by its permissions or an immutable flag"
    if os.access(folder, os.W_OK | os.X_OK):
        return ""
    wal, shm = _sidecar(path, "-wal"), _sidecar(path, "-shm")
    if wal.exists() and shm.exists() and _writable(wal) and _writable(shm):
        return ""
    return (
        f"its directory {folder} is not writable, and SQLite writes its {wal.name} and "
        f"{shm.name} files there"
    )


def _in_wal_mode(path: Path) -> bool:
    with path.open("rb") as handle:
        handle.seek(_WAL_VERSION_OFFSET)
        return handle.read(1) == b"\x02"


def access_of(path: Path) -> Access:
    """How to open the store file at ``path``, found without writing anything.

    A missing file is ``rw`` (it is created); one that cannot be created is
    refused by ``creation_error`` when that is tried."""
    if not path.is_file():
        return Access()
    why = _why_read_only(path)
    if not why:
        return Access()
    shm = _sidecar(path, "-shm")
    folder = path.absolute().parent
    can_create = not _read_only_mount(path) and os.access(folder, os.W_OK | os.X_OK)
    if shm.exists() or can_create or not _in_wal_mode(path):
        return Access("ro", why)
    wal = _sidecar(path, "-wal")
    if wal.exists() and wal.stat().st_size > 0:
        raise StoreReadOnly(
            f"cannot read the SQLite store {path}: it is read-only ({why}); its latest "
            f"commits are still in {wal.name}, and reading them needs {shm.name}, which "
            "cannot be created there. Make the directory writable and open the store once "
            f"(any cairn command), or copy {path.name} and {wal.name} together into a "
            "writable directory and read the copy. Nothing was changed."
        )
    return Access("immutable", why)


def connect(path: Path, access: Access, *, timeout: float) -> sqlite3.Connection:
    """A connection to ``path`` opened as ``access`` says (autocommit mode)."""
    # check_same_thread=False only so a store may close every thread's
    # connection; each is still used by its own thread alone.
    if access.mode == "rw":
        return sqlite3.connect(path, isolation_level=None, timeout=timeout, check_same_thread=False)
    query = "mode=ro&immutable=1" if access.mode == "immutable" else "mode=ro"
    return sqlite3.connect(
        f"{path.absolute().as_uri()}?{query}",
        uri=True,
        isolation_level=None,
        timeout=timeout,
        check_same_thread=False,
    )


def connect_reader(path: Path, *, timeout: float) -> sqlite3.Connection:
    """A connection to the existing store at ``path`` that can only read: ``ro``
    even where the file could be written, ``immutable`` where ``access_of`` says."""
    access = access_of(path)
    return connect(path, access if access.read_only else Access("ro"), timeout=timeout)


def prepare_new(path: Path) -> None:
    """Make the directory for a new store file at ``path``; raise ``StoreReadOnly``
    (or ``StoreError``) saying why if the file could not be created there."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _creation_error(path, exc) from exc
    if not os.access(path.absolute().parent, os.W_OK | os.X_OK):
        raise _creation_error(path)


def _creation_error(path: Path, exc: OSError | None = None) -> StoreError:
    folder = path.absolute().parent
    existing = next((p for p in (folder, *folder.parents) if p.exists()), folder)
    denied = exc is None or exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM)
    cause = f" ({exc.strerror})" if exc is not None and exc.strerror else ""
    if _read_only_mount(existing):
        where = f"the file system holding {existing} is mounted read-only"
    elif not os.access(existing, os.W_OK | os.X_OK):
        where = f"{existing} cannot be written"
    else:
        where = f"{folder} could not be made{cause}"
    error = StoreReadOnly if denied else StoreError
    return error(
        f"cannot create a cairn store at {path}: {where}. Give a path in a directory "
        "you can write (--store / CAIRN_STORE, or Cairn(store=...)). Nothing was created."
    )


def store_error(
    exc: sqlite3.Error, path: Path, access: Access, busy_seconds: float
) -> StoreError | None:
    """The cairn error ``exc`` means for the store at ``path``, or None for
    errors that are not about the file (a constraint, cairn's own SQL)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return None
    said = f"SQLite: {exc}"
    primary = code & 0xFF
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
        why = access.why or "the file, its directory or its file system cannot be written"
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
    return None


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
