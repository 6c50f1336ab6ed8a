"""Task and batch listings with filters, keyset pages both ways and totals.

A page is read by position, never by OFFSET: the newest page, the page older
than a cursor, or the page newer than one, each one indexed read however many
tasks the store holds, plus a COUNT for the total. A cursor is an opaque text
for a URL or ``cairn tasks --older-than``; it names where a page ended.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from cairn.errors import CairnError
from cairn.store import AdminStore
from cairn.store.records import TASK_STATUSES, BatchSummary, TaskRecord
from cairn.store.reports import TaskQuery

__all__ = [
    "BadCursor",
    "BatchPage",
    "Cursor",
    "TaskPage",
    "TaskQuery",
    "batch_page",
    "iter_tasks",
    "task_page",
]

E = TypeVar("E")  # where a page ends: a task's position, a batch's (created_at, name)
R = TypeVar("R")  # a row of a page

# Opaque text naming the edge of a page (base64 of a small JSON list).
Cursor = str
DEFAULT_SIZE = 50
# A search's total is counted up to this many (then shown as "more than").
SEARCH_COUNT = 1000
MAX_SIZE = 1000


class BadCursor(CairnError, ValueError):
    """A page cursor that no page of this listing gave."""


@dataclass(frozen=True, slots=True)
class TaskPage:
    """One page of tasks, newest first: ``total`` tasks match in all; ``newer``
    and ``older`` are the cursors of the pages on either side (None at an end)."""

    rows: list[TaskRecord]
    total: int
    newer: Cursor | None
    older: Cursor | None
    # A search counts no further than SEARCH_COUNT: ``total`` is then "at least".
    total_capped: bool = False


@dataclass(frozen=True, slots=True)
class BatchPage:
    """One page of batches, newest first, like ``TaskPage``."""

    rows: list[BatchSummary]
    total: int
    newer: Cursor | None
    older: Cursor | None


def _encode(kind: str, *parts: Any) -> Cursor:
    raw = json.dumps([kind, *parts], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(kind: str, cursor: Cursor) -> list[Any]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        value = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (ValueError, TypeError):
        value = None
    if not isinstance(value, list) or not value or value[0] != kind:
        raise BadCursor(
            f"{cursor!r} is not a page cursor of this {kind} listing; start again from the "
            "first page (give no cursor)"
        )
    return value[1:]


def _task_edge(cursor: Cursor) -> int:
    parts = _decode("task", cursor)
    pos = parts[0] if len(parts) == 1 else None
    if not isinstance(pos, int) or isinstance(pos, bool):
        raise BadCursor(
            f"{cursor!r} is a damaged task page cursor; start again from the first page"
        )
    return pos


def _check_size(size: int) -> None:
    if not 1 <= size <= MAX_SIZE:
        raise ValueError(f"a page holds 1 to {MAX_SIZE} rows; {size} asked for")


def _check_query(query: TaskQuery) -> None:
    if query.status is not None and query.status not in TASK_STATUSES:
        raise ValueError(
            f"unknown task status {query.status!r}; use one of: {', '.join(TASK_STATUSES)}"
        )
    for label, moment in (("since", query.since), ("until", query.until)):
        # A naive time would mean UTC on one backend and local time on another.
        if moment is not None and moment.tzinfo is None:
            raise ValueError(
                f"TaskQuery.{label} {moment.isoformat()} has no UTC offset; give an aware "
                "datetime, such as datetime(2026, 5, 24, tzinfo=UTC)"
            )


# A store's page read: (below, above, size) -> rows newest first.
_Fetch = Callable[[E | None, E | None, int], list[R]]


def _window(
    fetch: _Fetch[E, R], edge: Callable[[R], E], below: E | None, above: E | None, size: int
) -> tuple[list[R], bool, bool]:
    """The page of ``size`` rows below ``below`` (or the newest), or, given only
    ``above``, just above it; and whether more lie newer and older of it. One
    row past the page says more lie that way; the other way, one look."""
    found = fetch(below, above, size + 1)
    more = len(found) > size
    if above is not None and below is None:
        found = found[-size:]
        older = bool(fetch(edge(found[-1]) if found else above, None, 1))
        return found, more, older
    found = found[:size]
    newer = bool(found) and below is not None and bool(fetch(None, edge(found[0]), 1))
    return found, newer, more


def _edges(older_than: Cursor | None, newer_than: Cursor | None, size: int) -> None:
    _check_size(size)
    if older_than is not None and newer_than is not None:
        raise ValueError("ask for the page older than a cursor or newer than one, not both")


def task_page(
    store: AdminStore,
    query: TaskQuery,
    *,
    older_than: Cursor | None = None,
    newer_than: Cursor | None = None,
    size: int = DEFAULT_SIZE,
) -> TaskPage:
    """The page of tasks ``query`` picks, newest first: the newest, or the one
    just older than ``older_than``, or the one just newer than ``newer_than``."""
    _edges(older_than, newer_than, size)
    _check_query(query)

    def fetch(below: int | None, above: int | None, n: int) -> list[tuple[int, TaskRecord]]:
        return store.find_tasks(query, below=below, above=above, size=n)

    found, newer, older = _window(
        fetch,
        lambda row: row[0],
        None if older_than is None else _task_edge(older_than),
        None if newer_than is None else _task_edge(newer_than),
        size,
    )
    total, capped = _total(store, query, found, whole=not (older_than or newer_than or older))
    return TaskPage(
        rows=[task for _, task in found],
        total=total,
        newer=_encode("task", found[0][0]) if newer and found else None,
        older=_encode("task", found[-1][0]) if older and found else None,
        total_capped=capped,
    )


def _total(
    store: AdminStore, query: TaskQuery, found: list[Any], *, whole: bool
) -> tuple[int, bool]:
    """How many tasks ``query`` picks, and whether that is a lower bound. A
    search's matches (any part of the id, name or error text) are found by a
    scan, or on PostgreSQL with pg_trgm by trigram indexes that a common term
    gains nothing from: when the first page holds them all, that page is the
    count; otherwise they are counted no further than ``SEARCH_COUNT``, so a
    common term answers fast."""
    if not query.search:
        return store.count_tasks(query), False
    if whole:
        return len(found), False
    counted = store.count_tasks(query, up_to=SEARCH_COUNT + 1)
    return min(counted, SEARCH_COUNT), counted > SEARCH_COUNT


def _batch_edge(cursor: Cursor) -> tuple[datetime, str]:
    parts = _decode("batch", cursor)
    try:
        created, name = parts
        return datetime.fromisoformat(created), str(name)
    except (ValueError, TypeError) as exc:
        raise BadCursor(
            f"{cursor!r} is a damaged batch page cursor; start again from the first page"
        ) from exc


def _batch_cursor(summary: BatchSummary) -> Cursor:
    return _encode("batch", summary.created_at.isoformat(), summary.name)


def batch_page(
    store: AdminStore,
    *,
    search: str | None = None,
    older_than: Cursor | None = None,
    newer_than: Cursor | None = None,
    size: int = DEFAULT_SIZE,
) -> BatchPage:
    """A page of batches (name holding ``search``, any case), newest first, as
    ``task_page`` pages tasks."""
    _edges(older_than, newer_than, size)

    def fetch(
        below: tuple[datetime, str] | None, above: tuple[datetime, str] | None, n: int
    ) -> list[BatchSummary]:
        return store.batch_page(search=search, below=below, above=above, size=n)

    found, newer, older = _window(
        fetch,
        lambda row: (row.created_at, row.name),
        None if older_than is None else _batch_edge(older_than),
        None if newer_than is None else _batch_edge(newer_than),
        size,
    )
    return BatchPage(
        rows=found,
        total=store.count_batches(search),
        newer=_batch_cursor(found[0]) if newer and found else None,
        older=_batch_cursor(found[-1]) if older and found else None,
    )


def iter_tasks(
    store: AdminStore, query: TaskQuery, *, limit: int | None = None
) -> Iterator[TaskRecord]:
    """The tasks ``query`` picks, in enqueue order (oldest first), read a page
    at a time by position: never a whole table in memory, no cursor held open
    between pages, so a caller may write while iterating. At most ``limit``."""
    _check_query(query)
    return store.list_tasks(query=query, limit=limit)
