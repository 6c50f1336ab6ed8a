"""The ``--blobs`` option shared by the commands that move or keep blobs."""

from __future__ import annotations

from typing import Annotated

import typer

from cairn.blobs import BlobStore, default_blobs_url, open_blobs
from cairn.errors import CairnError

from ._consoles import fail

BlobsOption = Annotated[
    str | None,
    typer.Option(
        "--blobs",
        envvar="CAIRN_BLOBS",
        show_envvar=True,
        metavar="URL",
        help="The blob store: file:///abs/dir or s3://bucket/prefix. Default: the "
        "directory beside a SQLite store (cairn.db-blobs); none for PostgreSQL.",
    ),
]


def blobs_for(store_url: str, blobs: str | None) -> BlobStore | None:
    """The blob store named by ``--blobs``, else the store's default one."""
    url = blobs or default_blobs_url(store_url)
    if url is None:
        return None
    try:
        return open_blobs(url)
    except CairnError as exc:
        fail(str(exc))
