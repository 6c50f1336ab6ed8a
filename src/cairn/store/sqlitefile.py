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
What SQLite's errors mean for a store file (locked, read-only, full, damaged)
is decided in ``cairn.store.driver_errors``, with every other driver error.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cairn.errors import StoreError, StoreReadOnly

__all__ = [
    "Access",
    "access_of",
    "connect",
    "connect_reader",
    "prepare_new",
]

Mode = Literal["rw", "ro", "immutable"]

# Byte 18 of a SQLite file's header: 2 when the file is in WAL mode.
_WAL_VERSION_OFFSET = 18


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
