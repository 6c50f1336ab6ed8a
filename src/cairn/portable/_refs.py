"""Finding the blobs that records refer to."""

from __future__ import annotations

from collections.abc import Iterable

from cairn.blobs.ref import PREFIX, is_ref, parse_ref
from cairn.errors import TransferError
from cairn.store import sqlmove
from cairn.store.protocol import Store
from cairn.store.sqlbase import SQLStore

PREFIX_BYTES = PREFIX.encode()


def sql_store(store: Store, what: str) -> SQLStore:
    """``store`` as the SQL store these tools work on."""
    if not isinstance(store, SQLStore):
        raise TransferError(f"{what} works on cairn's SQL stores, not {type(store).__name__}")
    return store


def hashes_in(values: Iterable[object]) -> set[str]:
    """The sha256 of every blob reference among ``values`` (text, or the bytes of a
    message's ``content`` column, which holds an offloaded message's reference as is)."""
    found: set[str] = set()
    for value in values:
        if isinstance(value, bytes | bytearray | memoryview):
            raw = bytes(value)
            value = raw.decode() if raw.startswith(PREFIX_BYTES) else None
        if isinstance(value, str) and is_ref(value):
            found.add(parse_ref(value).sha256)
    return found


def referenced_blobs(store: SQLStore) -> set[str]:
    """Every blob any record of ``store`` refers to."""
    found: set[str] = set()
    for query, params in sqlmove.BLOB_REFERENCES:
        found |= hashes_in(row[0] for row in store._exec(query, params).rows)
    return found
