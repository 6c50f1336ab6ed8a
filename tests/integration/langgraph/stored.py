"""What the checkpointer's tables hold for a thread, read from the store (not
from the saver's cache): row counts, and the message entries decoded."""

from __future__ import annotations

from typing import Any

from cairn.integrations.langgraph import CairnSaver
from cairn.integrations.langgraph._chain import StoredRow, id_text
from cairn.integrations.langgraph._place import Counts, Place
from cairn.integrations.langgraph._rows import VALUE, CheckpointRecord

ROWS = (
    "SELECT r.rid, r.checkpoint, r.base, r.data FROM cairn_lg_rows r"
    " JOIN cairn_lg_places p ON p.place = r.place"
    " WHERE p.thread_id = ? AND p.checkpoint_ns = ? ORDER BY r.rid"
)
ALL_ROWS = "SELECT COUNT(*) FROM cairn_lg_rows"


def place(saver: CairnSaver, thread: str, ns: str = "") -> Place:
    """The thread's namespace as stored, decoded afresh."""
    found = saver.store._exec(ROWS, (thread, ns)).rows
    rows = [StoredRow(r, None if c is None else id_text(c), b, bytes(d)) for r, c, b, d in found]
    return Place.read(Counts(0, 0, 0), rows)[0]


def rows(saver: CairnSaver, thread: str, kind: str = "all") -> int:
    """The thread's stored rows: "checkpoints", "writes" or "all"."""
    found = place(saver, thread)
    if kind == "checkpoints":
        return len(found.checkpoints)
    if kind == "writes":
        return sum(len(rids) for _, rids in found.writes.items())
    return len(found.records)


def stored_messages(saver: CairnSaver, thread: str) -> tuple[int, int]:
    """(messages stored in the thread's messages entries, entries stored whole)."""
    items = whole = 0
    found = place(saver, thread)
    for record in map(found.record, found.records):
        if isinstance(record, CheckpointRecord):
            for entry in record.entries:
                if entry.channel == "messages":
                    items += len(saver._load(entry.typed))
                    whole += entry.kind == VALUE
    return items, whole


def all_rows(store: Any) -> int:
    """Rows in the checkpointer's tables, every thread."""
    return int(store._exec(ALL_ROWS).rows[0][0])
