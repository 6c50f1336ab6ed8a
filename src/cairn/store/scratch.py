"""Scratch space on disk for a set or a map that grows with a batch.

``cairn export`` and ``cairn import`` stream a batch a row at a time, so their
memory stays flat however many tasks the batch has; but each also keeps keys
it meets along the way: the blobs an export must append after the rows (sorted,
each once), the conversation keys an import checks and maps to the target's
own. A batch with a blob or a conversation per task would make a Python set or
dict of those grow with it. ``Scratch`` keeps them in a private temporary
SQLite database instead: SQLite holds a few pages of it in memory (its page
cache, 2 MB by default) and the rest in a temporary file, deleted on close.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from types import TracebackType
from typing import Any

# The keys are of whatever type they are given (no column affinity): text for
# a blob's sha256, an integer for a conversation's key.
_CREATE = "CREATE TABLE scratch (key PRIMARY KEY, value) WITHOUT ROWID"
_ADD = "INSERT OR IGNORE INTO scratch (key) VALUES (?)"
_PUT = "INSERT OR REPLACE INTO scratch (key, value) VALUES (?, ?)"
_GET = "SELECT value FROM scratch WHERE key = ?"
_KEYS = "SELECT key FROM scratch ORDER BY key"
_CLEAR = "DELETE FROM scratch"


class Scratch:
    """A set of keys, each with a value if ``put`` gave one, kept on disk.

    Keys of one kind come out of ``sorted`` in the order Python's ``sorted``
    gives (text by its UTF-8 bytes, which is by code point; integers by
    value). Use it from the thread that made it."""

    def __init__(self) -> None:
        # "" opens a private temporary database: a file of its own, cached in
        # memory only up to the page cache, removed when the connection closes.
        self._db = sqlite3.connect("", isolation_level=None)
        # Nothing here must survive a crash: it is thrown away on close anyway.
        self._db.execute("PRAGMA journal_mode = OFF")
        self._db.execute("PRAGMA synchronous = OFF")
        self._db.execute(_CREATE)
        self._count = 0

    def add(self, key: Any) -> None:
        """Add ``key`` (with no value) if it is not there yet."""
        self._count += self._db.execute(_ADD, (key,)).rowcount

    def put(self, key: Any, value: Any) -> None:
        """Set ``key``'s value (adding the key if needed)."""
        if key not in self:
            self._count += 1
        self._db.execute(_PUT, (key, value))

    def get(self, key: Any) -> tuple[Any] | None:
        """``(value,)`` if ``key`` is there (the value None if it has none), else None."""
        row = self._db.execute(_GET, (key,)).fetchone()
        return None if row is None else (row[0],)

    def clear(self) -> None:
        """Remove every key."""
        self._db.execute(_CLEAR)
        self._count = 0

    def __contains__(self, key: object) -> bool:
        return self.get(key) is not None

    def __len__(self) -> int:
        return self._count

    def sorted(self) -> Iterator[Any]:
        """Every key, in order, read a page at a time."""
        cursor = self._db.execute(_KEYS)
        while page := cursor.fetchmany(256):
            for (key,) in page:
                yield key

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Scratch:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()
