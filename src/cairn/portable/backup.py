"""``cairn backup``: a consistent copy of a SQLite store, with its blobs.

The database is copied with SQLite's online backup API in one step, under one
read transaction: a snapshot as of one commit, safe while a batch is writing
(WAL mode lets the writers go on). Then every blob the copy refers to is copied
into the directory beside it (``DEST-blobs``), fsynced. Blobs are written before
the records that refer to them, so every blob the snapshot names already exists.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from cairn.blobs.file import FileBlobStore
from cairn.blobs.protocol import BlobStore
from cairn.errors import TransferError
from cairn.portable._refs import hashes_in
from cairn.store import sqlmove
from cairn.store.sqlitefile import connect_reader


@dataclass(frozen=True)
class BackupSummary:
    """What a backup wrote."""

    path: Path
    bytes: int
    blobs_dir: Path | None
    blobs: int


def _snapshot(source: Path, dest: Path) -> None:
    partial = dest.with_name(dest.name + ".partial")
    partial.unlink(missing_ok=True)
    src = connect_reader(source, timeout=30.0)  # on a read-only store too
    try:
        out = sqlite3.connect(partial)
        try:
            src.backup(out)  # pages=-1: the whole database in one step, one snapshot
            out.execute("PRAGMA journal_mode=DELETE")  # a single self-contained file
        finally:
            out.close()
    finally:
        src.close()
    with partial.open("rb") as handle:
        os.fsync(handle.fileno())
    partial.replace(dest)


def _referenced(path: Path) -> set[str]:
    conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    try:
        found: set[str] = set()
        for query, params in sqlmove.BLOB_REFERENCES:
            found |= hashes_in(row[0] for row in conn.execute(query, params))
        return found
    finally:
        conn.close()


def backup_sqlite(source: Path, dest: Path, blobs: BlobStore | None) -> BackupSummary:
    """Copy the SQLite store at ``source`` to ``dest``, and its blobs beside it."""
    if not source.is_file():
        raise TransferError(f"no cairn store at {source}")
    if dest.exists():
        raise TransferError(f"{dest} already exists; cairn backup never overwrites a file")
    dest.parent.mkdir(parents=True, exist_ok=True)
    _snapshot(source, dest)
    wanted = _referenced(dest)
    if not wanted:
        return BackupSummary(dest, dest.stat().st_size, None, 0)
    if blobs is None:
        raise TransferError(
            f"the store refers to {len(wanted)} blob(s) but no blob store is configured; "
            f"pass --blobs URL. The database copy is at {dest}, without its blobs."
        )
    target = FileBlobStore(Path(str(dest.absolute()) + "-blobs"))
    for digest in sorted(wanted):
        target.put(digest, blobs.get(digest))
    return BackupSummary(dest, dest.stat().st_size, target.root, len(wanted))
