"""A consistent copy of a SQLite store file (``cairn backup``), and the blob
references a copy holds.

The database is copied with SQLite's online backup API in one step, under one
read transaction: a snapshot as of one commit, safe while a batch is writing
(WAL mode lets the writers go on). The copy is a single self-contained file
(journal mode DELETE), fsynced, and put in place by a rename. A driver error
becomes a cairn error (``cairn.store.driver_errors``).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from cairn.store import sqlmove
from cairn.store.driver_errors import sqlite_error
from cairn.store.sqlitefile import connect_reader

__all__ = ["blob_refs_of_copy", "copy_store_file"]

_BUSY_SECONDS = 30.0
# The copy is read and handed on as one file, without a -wal beside it.
_SINGLE_FILE = "PRAGMA journal_mode=DELETE"


def copy_store_file(source: Path, dest: Path) -> None:
    """Copy the store file at ``source`` to ``dest`` (which must not exist yet),
    as of one commit; on a read-only store too."""
    partial = dest.with_name(dest.name + ".partial")
    partial.unlink(missing_ok=True)
    try:
        src = connect_reader(source, timeout=_BUSY_SECONDS)
        try:
            out = sqlite3.connect(partial)
            try:
                src.backup(out)  # pages=-1: the whole database in one step, one snapshot
                out.execute(_SINGLE_FILE)
            finally:
                out.close()
        finally:
            src.close()
    except sqlite3.Error as exc:
        raise sqlite_error(exc, source, "", _BUSY_SECONDS) from exc
    with partial.open("rb") as handle:
        os.fsync(handle.fileno())
    partial.replace(dest)


def blob_refs_of_copy(path: Path) -> Iterator[str]:
    """Every blob reference the records of the copied store file at ``path``
    hold, read without opening it as a store (which would migrate it and set
    WAL mode)."""
    try:
        conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
        try:
            found = [
                ref
                for query, params in sqlmove.BLOB_REFERENCES
                for ref in sqlmove.ref_texts(row[0] for row in conn.execute(query, params))
            ]
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise sqlite_error(exc, path, "", _BUSY_SECONDS) from exc
    yield from found
