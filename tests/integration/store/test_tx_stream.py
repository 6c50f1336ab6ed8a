"""``Tx.stream``: a read whose rows are fetched a page at a time, for a reader
(``cairn export``) whose result may not fit in memory.

Every test here runs on each backend (the conformance suite).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from cairn.store import open_store
from cairn.store.records import NewTask
from cairn.store.sqlbase import SQLStore
from cairn.store.sqlcore import STREAM_PAGE, Tx

TASKS = 2 * STREAM_PAGE + 7  # more than two pages, the last one short


@pytest.fixture
def store(store_url: str) -> Iterator[SQLStore]:
    """The test's store with ``TASKS`` tasks in batch ``b``, closed after it."""
    opened = open_store(store_url)
    assert isinstance(opened, SQLStore)
    tasks = [NewTask(f"b/n={n}", "work", "{}", "json", "b", f"n={n}") for n in range(TASKS)]
    opened.enqueue(tasks, datetime.now(UTC))
    yield opened
    opened.close()


def test_a_stream_gives_every_row_in_order_across_pages(store: SQLStore) -> None:
    """A stream of a read longer than two pages gives every row once, in the
    read's order, and the transaction's next statement runs after it."""

    def read(tx: Tx) -> tuple[list[str], int]:
        ids = [
            row[0] for row in tx.stream("SELECT id FROM tasks WHERE batch = ? ORDER BY pos", ["b"])
        ]
        return ids, tx.exec("SELECT COUNT(*) FROM tasks").rows[0][0]

    ids, count = store._snapshot(read)
    assert ids == [f"b/n={n}" for n in range(TASKS)]
    assert count == TASKS


def test_a_stream_of_a_read_that_finds_nothing_is_empty(store: SQLStore) -> None:
    """A stream of a read that finds no row gives none."""
    rows = store._snapshot(
        lambda tx: list(tx.stream("SELECT id FROM tasks WHERE batch = ?", ["x"]))
    )
    assert rows == []
