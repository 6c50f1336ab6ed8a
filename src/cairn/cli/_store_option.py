"""The ``--store`` option and the store it names: opened, checked, read safely.

Reading commands never create or migrate a store: they open an existing cairn
store or stop with one red line and exit code 2, leaving every file as it was.
The commands that write one (``migrate``, ``import``, ``worker``) may create it,
and name it on stderr when they do.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, TypeVar
from urllib.parse import urlsplit

import typer

from cairn.errors import CairnError, NotACairnStore
from cairn.store import (
    DEFAULT_URL,
    AdminStore,
    check_store_url,
    creation_notice,
    open_store,
    sqlite_path,
)
from cairn.store.sqlite import inspect_file

from ._consoles import fail, note

__all__ = [
    "DEFAULT_URL",
    "StoreOption",
    "created_note",
    "opened_store",
    "opened_store_if_any",
    "require_batch",
    "store_file",
    "streamed",
]

T = TypeVar("T")

StoreOption = Annotated[
    str,
    typer.Option(
        "--store",
        envvar="CAIRN_STORE",
        show_envvar=True,
        metavar="URL",
        help="The cairn store: sqlite:///relative/path.db, sqlite:////absolute/path.db, "
        "a plain file path, or postgresql://user@host:5432/dbname.",
    ),
]


def store_file(url: str) -> Path | None:
    """The SQLite file ``url`` names, or None for a store that is not a file.
    A malformed URL (``sqlite:x.db``) raises ``ConfigurationError``."""
    check_store_url(url)
    if "://" not in url:
        return Path(url)
    if urlsplit(url).scheme == "sqlite":
        return sqlite_path(url)
    return None


def _check_existing_file(path: Path) -> None:
    """Stop unless ``path`` holds a cairn store this cairn can read (reads only)."""
    if not path.exists():
        fail(
            f"no cairn store at {path.absolute()}; run a batch first or pass --store / "
            "set CAIRN_STORE"
        )
    if inspect_file(path) == 0:
        fail(
            f"{path.absolute()} is empty, not a cairn store yet; run a batch first or "
            "pass --store / set CAIRN_STORE. The file was not changed."
        )


@contextmanager
def opened_store(url: str, *, create: bool = False) -> Iterator[AdminStore]:
    """The existing store at ``url``, closed afterwards; with ``create``, a new
    one if there is none yet (named on stderr, see ``created_note``).

    Any cairn error raised while it is open (a bad URL, a foreign file, an unknown
    task) becomes one red line and exit code 2.
    """
    try:
        path = store_file(url)
        if path is not None and not create:
            _check_existing_file(path)
        store = open_store(url, create=create)
        created_note(store, url)
        try:
            yield store
        finally:
            store.close()
    except CairnError as exc:
        # A store turns every driver error into one of cairn's (store/driver_errors.py).
        fail(str(exc))


@contextmanager
def opened_store_if_any(url: str) -> Iterator[AdminStore | None]:
    """The existing store at ``url``, or None if there is none there yet: no
    SQLite file (or an empty one), or no cairn schema in the PostgreSQL
    database. Nothing is created. Any other cairn error (a bad URL, a foreign
    file, a server that does not answer) is one red line and exit code 2."""
    try:
        path = store_file(url)
        if path is not None and (not path.exists() or inspect_file(path) == 0):
            store = None
        else:
            try:
                store = open_store(url, create=False)
            except NotACairnStore:
                if path is not None:
                    raise  # a file that is something else: never read as "no store yet"
                store = None
        try:
            yield store
        finally:
            if store is not None:
                store.close()
    except CairnError as exc:
        fail(str(exc))


def created_note(store: AdminStore, url: str) -> None:
    """Name ``store`` on stderr if opening it just created it (with a warning when
    it is the default store, relative to the current directory)."""
    for line in creation_notice(store, defaulted=url == DEFAULT_URL):
        note(line)


def require_batch(store: AdminStore, name: str) -> None:
    """Stop with a helpful line unless batch ``name`` exists in ``store``."""
    if store.batch_summaries(name):
        return
    known = [summary.name for summary in store.batch_summaries()]
    listed = ", ".join(known[:10]) + (", ..." if len(known) > 10 else "") if known else "none"
    fail(f"no batch named {name!r} in {store.url} (batches: {listed}); see `cairn batches`")


@contextmanager
def streamed(rows: Iterator[T]) -> Iterator[Iterator[T]]:
    """``rows`` from a store, closed on exit even if not read to the end.

    A store's row stream holds a connection of its own; closing it here, before
    the store closes, releases that connection in order.
    """
    try:
        yield rows
    finally:
        close = getattr(rows, "close", None)
        if close is not None:
            close()
