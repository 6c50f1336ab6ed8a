"""``cairn export --batch B FILE`` and ``cairn import FILE``: move one batch
between stores (SQLite or PostgreSQL, either way), with its blobs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cairn.errors import CairnError
from cairn.portable import export_batch, import_batch

from ._blobs_option import BlobsOption, blobs_for
from ._consoles import fail, note
from ._store_option import DEFAULT_URL, StoreOption, opened_store


def export_command(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="The export file to write.")],
    batch: Annotated[str, typer.Option("--batch", "-b", help="The batch to export.")],
    store: StoreOption = DEFAULT_URL,
    blobs: BlobsOption = None,
) -> None:
    """Write one batch (its tasks, history, operations, conversations and blobs) to
    FILE, consistently even while it runs. `cairn import FILE` reads it elsewhere."""
    if file.exists():
        fail(f"{file} already exists; cairn export never overwrites a file")
    partial = file.with_name(file.name + ".partial")
    with opened_store(store) as opened:
        try:
            with partial.open("w", encoding="utf-8") as out:
                done = export_batch(opened, blobs_for(store, blobs), batch, out)
        except (CairnError, OSError) as exc:
            partial.unlink(missing_ok=True)
            fail(str(exc))
    partial.replace(file)
    note(
        f"exported batch {done.batch!r}: {done.tasks} task(s), {done.rows} row(s), "
        f"{done.blobs} blob(s) to {file}"
    )


def import_command(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="A file from `cairn export`.")],
    store: StoreOption = DEFAULT_URL,
    blobs: BlobsOption = None,
) -> None:
    """Add the batch in FILE to the store (created if there is none yet): all of it,
    or nothing if any of its ids is taken. Tasks that were running come in pending;
    a worker resumes them."""
    if not file.is_file():
        fail(f"no export file at {file}")
    with opened_store(store, create=True) as opened:
        try:
            with file.open(encoding="utf-8") as lines:
                done = import_batch(opened, blobs_for(store, blobs), lines, str(file))
        except (CairnError, OSError) as exc:
            fail(str(exc))
    note(
        f"imported batch {done.batch!r}: {done.tasks} task(s), {done.rows} row(s), "
        f"{done.blobs} blob(s) into {opened.url}"
    )
