"""``cairn backup DEST``: a consistent copy of a SQLite store and its blobs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cairn.errors import CairnError
from cairn.portable import backup_sqlite

from ._blobs_option import BlobsOption, blobs_for
from ._consoles import fail, note
from ._store_option import DEFAULT_URL, StoreOption, opened_store, store_file


def backup_command(
    dest: Annotated[Path, typer.Argument(metavar="DEST", help="The new .db file to write.")],
    store: StoreOption = DEFAULT_URL,
    blobs: BlobsOption = None,
) -> None:
    """Copy a SQLite store to DEST (and its blobs to DEST-blobs), safely while a
    batch runs. Resume from the copy on any machine with --store DEST.

    For PostgreSQL use pg_dump, or move one batch with `cairn export`.
    """
    path = store_file(store)
    if path is None:
        fail(
            f"cairn backup copies SQLite stores; {store} is not one. Use pg_dump, or "
            "`cairn export --batch B FILE` to move one batch."
        )
    with opened_store(store):
        pass  # checks that it is a cairn store this cairn can read
    try:
        done = backup_sqlite(path, dest, blobs_for(store, blobs))
    except (CairnError, OSError) as exc:
        fail(str(exc))
    where = f" and {done.blobs} blob(s) to {done.blobs_dir}" if done.blobs_dir else ""
    note(f"copied {path} ({done.bytes} bytes) to {done.path}{where}")
