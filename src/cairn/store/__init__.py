"""Stores: where batches, tasks and histories live. ``open_store`` picks one by URL.

``Store`` is what the engine asks of a store; ``AdminStore`` adds listings,
reports, export and maintenance, and ``admin(store)`` gives a store's admin side.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from cairn.errors import ConfigurationError
from cairn.store.admin import AdminStore, admin
from cairn.store.capabilities import Capabilities
from cairn.store.protocol import Store
from cairn.store.sqlite import SQLiteStore, Synchronous

__all__ = ["AdminStore", "Capabilities", "SQLiteStore", "Store", "admin", "open_store"]

DEFAULT_URL = "sqlite:///.cairn/cairn.db"


def sqlite_path(url: str) -> Path:
    """The file path inside a ``sqlite:///`` URL (``sqlite:////abs`` for absolute)."""
    rest = url[len("sqlite://") :]
    if not rest.startswith("/") or rest == "/":
        raise ConfigurationError(
            f"store URL {url!r} has no path. Write sqlite:///relative/path.db or "
            "sqlite:////absolute/path.db."
        )
    return Path(rest[1:])


def open_store(url: str, *, synchronous: Synchronous = "NORMAL", create: bool = True) -> AdminStore:
    """Open the store at ``url``. A bare path means a SQLite file.

    ``create=False`` refuses to set up a store that does not exist yet (read-only
    callers such as the CLI); a SQLite caller checks the file itself first."""
    scheme = urlsplit(url).scheme if "://" in url else ""
    if scheme == "":
        return SQLiteStore(Path(url), synchronous=synchronous)
    if scheme == "sqlite":
        return SQLiteStore(sqlite_path(url), synchronous=synchronous)
    if scheme in ("postgres", "postgresql"):
        from cairn.store.postgres import PostgresStore

        return PostgresStore(url, create=create)
    raise ConfigurationError(
        f"unknown store URL scheme {scheme!r} in {url!r}. cairn understands "
        "sqlite:///path/to/cairn.db (or a plain file path) and "
        "postgresql://user@host:5432/dbname."
    )
