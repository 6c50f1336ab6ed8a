"""``cairn backup``: a consistent copy of a SQLite store, with its blobs.

The database is copied as of one commit, safe while a batch is writing
(``cairn.store.sqlitecopy``). Then every blob the copy refers to is copied
into the directory beside it (``DEST-blobs``), fsynced. Blobs are written before
the records that refer to them, so every blob the snapshot names already exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cairn.blobs.file import FileBlobStore
from cairn.blobs.in_store import hashes_in
from cairn.blobs.protocol import BlobStore
from cairn.errors import TransferError
from cairn.store.sqlitecopy import blob_refs_of_copy, copy_store_file


@dataclass(frozen=True)
class BackupSummary:
    """What a backup wrote."""

    path: Path
    bytes: int
    blobs_dir: Path | None
    blobs: int


def backup_sqlite(source: Path, dest: Path, blobs: BlobStore | None) -> BackupSummary:
    """Copy the SQLite store at ``source`` to ``dest``, and its blobs beside it."""
    if not source.is_file():
        raise TransferError(f"no cairn store at {source}")
    if dest.exists():
        raise TransferError(f"{dest} already exists; cairn backup never overwrites a file")
    dest.parent.mkdir(parents=True, exist_ok=True)
    copy_store_file(source, dest)
    wanted = hashes_in(blob_refs_of_copy(dest))
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
