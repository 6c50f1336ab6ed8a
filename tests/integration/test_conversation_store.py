"""The conversation part of the store contract: SQLite's own plan and format
(every backend's tests are in ``store/test_conversation_store.py``).

Rows are appended under the task's fence, one statement each; the active context
(row 0, the latest summary, the rows after what it covers) is read in one query
whose cost does not grow with the archived head.
"""

from __future__ import annotations

import sqlite3
import zlib
from pathlib import Path

from cairn.store import open_store
from cairn.store.records import MessageRecord
from tests.integration.store.test_conversation_store import (
    CONTENTS,
    NOW,
    TASK,
    claimed_fence,
    opened_conversation,
)


def test_the_active_read_probes_indexes_and_never_scans_the_archive(tmp_path: Path) -> None:
    """SQLite's plan for the active read uses the primary key, the summaries index
    and the conversations key index only: no scan of any table, so its cost
    follows the active rows."""
    path = tmp_path / "plan.db"
    open_store(str(path)).close()
    from cairn.store import sql

    conn = sqlite3.connect(path)
    try:
        plan = conn.execute(
            "EXPLAIN QUERY PLAN " + sql.LOAD_ACTIVE_MESSAGES, ("t", "c") * 3
        ).fetchall()
    finally:
        conn.close()
    details = [str(row[-1]) for row in plan]
    assert not [d for d in details if d.startswith("SCAN")], details
    assert any("messages_summaries" in d for d in details), details


def test_sqlite_stores_long_compressible_messages_compressed(tmp_path: Path) -> None:
    """On disk a message is b"j" + its UTF-8 JSON, or b"z" + the JSON zlib-compressed
    when that is at least a fifth smaller; created_at is integer microseconds."""
    path = tmp_path / "format.db"
    store = open_store(str(path))
    try:
        fence = claimed_fence(store)
        conv_id = opened_conversation(store, fence)
        for idx, content in enumerate(CONTENTS):
            row = MessageRecord(TASK, "main", idx, "user", content, 5, "message", None, None, NOW)
            assert store.append_message(conv_id, row, fence)
    finally:
        store.close()
    conn = sqlite3.connect(path)
    try:
        stored = conn.execute("SELECT content, created_at FROM messages ORDER BY idx").fetchall()
    finally:
        conn.close()
    short, prose, noise = (content for content, _ in stored)
    assert short == b"j" + CONTENTS[0].encode()
    assert prose[:1] == b"z"
    assert zlib.decompress(prose[1:]) == CONTENTS[1].encode()
    assert noise == b"j" + CONTENTS[2].encode()
    assert {created for _, created in stored} == {int(NOW.timestamp()) * 1_000_000}
