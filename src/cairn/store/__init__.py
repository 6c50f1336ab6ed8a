"""Stores: where batches, tasks and histories live. ``open_store`` picks one by URL.

``Store`` is what the engine asks of a store; ``AdminStore`` adds listings,
reports, export and maintenance, and ``admin(store)`` gives a store's admin side.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from cairn.errors import ConfigurationError
from cairn.redaction import shown_url
from cairn.store.admin import AdminStore, admin
from cairn.store.capabilities import Capabilities
from cairn.store.protocol import Store
from cairn.store.sqlite import SQLiteStore, Synchronous

__all__ = [
    "ACCEPTED_FORMS",
    "AdminStore",
    "Capabilities",
    "SQLiteStore",
    "Store",
    "admin",
    "check_store_url",
    "creation_notice",
    "open_store",
]

DEFAULT_URL = "sqlite:///.cairn/cairn.db"


ACCEPTED_FORMS = (
    "sqlite:///relative/path.db, sqlite:////absolute/path.db, a plain file path, or "
    "postgresql://user@host:5432/dbname (optionally ?schema=NAME&pool_size=N"
    "&reconnect_timeout=SECONDS and any libpq parameter)"
)
# "sqlite:x.db", "postgres:/db": a scheme without "//" is a mistyped URL, not a
# file name (a one-letter "scheme" is a Windows drive, C:\x.db).
_SCHEME_WITHOUT_SLASHES = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:(?!//)")


def check_store_url(url: str) -> None:
    """Refuse a store URL that is malformed, naming the forms cairn accepts."""
    if not url.strip():
        raise ConfigurationError(f"the store URL is empty. Write {ACCEPTED_FORMS}.")
    if "://" not in url and _SCHEME_WITHOUT_SLASHES.match(url):
        scheme = url.split(":", 1)[0]
        raise ConfigurationError(
            f"store URL {url!r} starts with {scheme}: but has no //, so it is neither a "
            f"URL nor a file path cairn will guess at. Write {ACCEPTED_FORMS}."
        )
    if url.startswith(("postgres://", "postgresql://")):
        _check_postgres_url(url)


def _check_postgres_url(url: str) -> None:
    """What the URL alone shows is wrong with a PostgreSQL URL, refused before any
    connection is tried (a driver would blame the server for it)."""
    parts = urlsplit(url)
    shown = urlsplit(shown_url(url))
    try:
        # .port raises ValueError for a port that is not a number. libpq's
        # multi-host form (host1:5432,host2:5432) is left to libpq.
        _ = None if "," in parts.netloc else parts.port
    except ValueError:
        port = parts.netloc.rsplit(":", 1)[-1]
        raise ConfigurationError(
            f"store URL {shown.geturl()!r} has port {port!r}, which is not a number from "
            f"1 to 65535. Write {ACCEPTED_FORMS}."
        ) from None
    schema = dict(parse_qsl(parts.query)).get("schema")
    if schema is not None and not schema.isidentifier():
        raise ConfigurationError(
            f"store URL {shown.geturl()!r} names schema {schema!r}, which is not a plain SQL "
            "identifier: use letters, digits and _, not starting with a digit "
            f"(?schema=cairn_jobs). Write {ACCEPTED_FORMS}."
        )


def sqlite_path(url: str) -> Path:
    """The file path inside a ``sqlite:///`` URL (``sqlite:////abs`` for absolute)."""
    rest = url[len("sqlite://") :]
    if not rest.startswith("/") or rest == "/":
        raise ConfigurationError(f"store URL {url!r} has no path. Write {ACCEPTED_FORMS}.")
    return Path(rest[1:])


def open_store(url: str, *, synchronous: Synchronous = "NORMAL", create: bool = True) -> AdminStore:
    """Open the store at ``url``. A bare path means a SQLite file.

    ``create=False`` refuses to set up a store that does not exist yet (read-only
    callers such as the CLI); a SQLite caller checks the file itself first."""
    check_store_url(url)
    scheme = urlsplit(url).scheme if "://" in url else ""
    if scheme == "":
        return SQLiteStore(Path(url), synchronous=synchronous)
    if scheme == "sqlite":
        return SQLiteStore(sqlite_path(url), synchronous=synchronous)
    if scheme in ("postgres", "postgresql"):
        from cairn.store.postgres import PostgresStore

        return PostgresStore(url, create=create)
    raise ConfigurationError(
        f"unknown store URL scheme {scheme!r} in {url!r}. Write {ACCEPTED_FORMS}."
    )


def creation_notice(store: Store, *, defaulted: bool = False) -> list[str]:
    """What to tell the user on stderr when opening ``store`` just created it
    (nothing if it was there): where it is, and, for the default store, that
    its path is relative to the current directory.

    ``defaulted``: the URL is ``DEFAULT_URL`` because nothing named a store.
    """
    if getattr(store, "found_schema", None) != 0:
        return []
    where = str(store.path.resolve()) if isinstance(store, SQLiteStore) else store.identity
    lines = [f"cairn: created a new store at {where}"]
    if defaulted:
        lines.append(
            f"cairn: warning: the default store ({DEFAULT_URL}) is relative to the current "
            "directory, so run from another directory you get another, empty store. Set "
            "CAIRN_STORE (or pass --store, or Cairn(store=...)) to use one store from anywhere."
        )
    return lines
