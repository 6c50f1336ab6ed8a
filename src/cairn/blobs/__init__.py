"""Large values outside the record: content-addressed blob stores and offload.

``open_blobs(url)`` opens a blob store: ``file:///abs/dir`` (or a plain path)
or ``s3://bucket/prefix`` (the ``s3`` extra; ``?endpoint_url=…`` for MinIO, R2
or any S3-compatible service). ``default_blobs_url(store_url)`` is the default:
``$CAIRN_BLOBS``, else a directory beside a SQLite file (``cairn.db-blobs``).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

from cairn.blobs.file import FileBlobStore
from cairn.blobs.offload import DEFAULT_INLINE_LIMIT, BlobCodec, Offloader, warn_if_large
from cairn.blobs.protocol import BlobInfo, BlobStore
from cairn.blobs.ref import PREFIX, BlobRef, is_ref, parse_ref
from cairn.errors import ConfigurationError

__all__ = [
    "DEFAULT_INLINE_LIMIT",
    "PREFIX",
    "BlobCodec",
    "BlobInfo",
    "BlobRef",
    "BlobStore",
    "FileBlobStore",
    "Offloader",
    "default_blobs_url",
    "is_ref",
    "open_blobs",
    "parse_ref",
    "warn_if_large",
]


def open_blobs(url: str) -> BlobStore:
    """The blob store at ``url``."""
    if "://" not in url:
        return FileBlobStore(Path(url))
    parts = urlsplit(url)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ConfigurationError(
                f"blob store URL {url!r} names host {parts.netloc!r}; use file:///abs/path"
            )
        return FileBlobStore(Path(unquote(parts.path)))
    if parts.scheme == "s3":
        from cairn.blobs.s3 import S3BlobStore

        return S3BlobStore.from_url(url)
    raise ConfigurationError(
        f"unknown blob store URL scheme {parts.scheme!r} in {url!r}. cairn understands "
        "file:///path/to/dir (or a plain path) and s3://bucket/prefix."
    )


def default_blobs_url(store_url: str) -> str | None:
    """``$CAIRN_BLOBS``, else the directory beside a SQLite store; None for others."""
    configured = os.environ.get("CAIRN_BLOBS")
    if configured:
        return configured
    from cairn.store import sqlite_path

    if "://" not in store_url:
        path = Path(store_url)
    elif urlsplit(store_url).scheme == "sqlite":
        path = sqlite_path(store_url)
    else:
        return None
    return str(path.absolute()) + "-blobs"
