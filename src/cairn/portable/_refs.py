"""Finding the blobs that records refer to."""

from __future__ import annotations

from collections.abc import Iterable

from cairn.blobs.ref import is_ref, parse_ref
from cairn.errors import TransferError
from cairn.store import sqlmove
from cairn.store.protocol import Store
from cairn.store.sqlbase import SQLStore


def sql_store(store: Store, what: str) -> SQLStore:
    """``store`` as the SQL store these tools work on."""
    if not isinstance(store, SQLStore):
        raise TransferError(f"{what} works on cairn's SQL stores, not {type(store).__name__}")
    return store


def hashes_in(values: Iterable[object]) -> set[str]:
    """The sha256 of every blob reference among ``values``."""
    return {parse_ref(v).sha256 for v in values if isinstance(v, str) and is_ref(v)}


def referenced_blobs(store: SQLStore) -> set[str]:
    """Every blob any record of ``store`` refers to."""
    found: set[str] = set()
    for query in sqlmove.BLOB_REFERENCES:
        found |= hashes_in(row[0] for row in store._exec(query).rows)
    return found
