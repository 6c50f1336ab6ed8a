"""Reading conversations outside a task: the active context, the archive, JSONL.

``load_conversation(store, task_id)`` reads the active context in time
proportional to it (as ``ctx.conversation`` does when it opens);
``iter_history`` streams every row, the compacted head included, in pages.
A conversation started from a handoff that carried its archive
(``conv.handoff(archive="inline")`` or ``"blob"``) holds that archive in its
first row's meta, not as rows of its own: ``iter_history`` (and so
``conv.history()`` and ``cairn conversation --all``) yields those carried rows
first, oldest first, each marked with ``carried`` (where the handoff came
from) and keeping the position it had in the earlier conversation;
``carried_history`` reads them alone.
Archived heads stay in the ``messages`` table, row by row; a message above the
app's ``inline_limit`` is in the blob store (``cairn.agent.message_blobs``), and both
read it back transparently, checking its hash. ``blobs`` names the blob store to
read from; by default it is the store's own (``$CAIRN_BLOBS``, else the
directory beside a SQLite file), opened only if a message needs it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any

from cairn.agent._window import Row, Window, rows_of
from cairn.agent.conversation_stats import ConversationStats, stats_of
from cairn.agent.handoff import archived_rows, build_handoff
from cairn.agent.message_blobs import MessageReader
from cairn.agent.messages import Message
from cairn.agent.summarize import summary_text
from cairn.blobs import BlobStore, Offloader
from cairn.clock import from_iso, to_iso
from cairn.store.protocol import Store
from cairn.store.records import MessageRecord

PAGE = 500


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One stored row of a conversation, as the archive shows it. ``carried``
    is set on a row a handoff carried from an earlier conversation (its task,
    conversation and the handoff's time); ``idx`` is then its position there."""

    idx: int
    kind: str
    message: Message
    tokens: int
    covers_until: int | None
    meta: dict[str, Any] | None
    created_at: datetime
    carried: dict[str, Any] | None = None

    @classmethod
    def of(cls, record: MessageRecord) -> StoredMessage:
        return cls(
            record.idx,
            record.kind,
            json.loads(record.content),
            record.tokens,
            record.covers_until,
            None if record.meta is None else json.loads(record.meta),
            record.created_at,
        )

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "idx": self.idx,
            "kind": self.kind,
            "tokens": self.tokens,
            "created_at": to_iso(self.created_at),
            "message": self.message,
        }
        if self.covers_until is not None:
            data["covers_until"] = self.covers_until
        if self.meta is not None:
            data["meta"] = self.meta
        if self.carried is not None:
            data["carried"] = self.carried
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any], carried: dict[str, Any]) -> StoredMessage:
        """A row as ``to_json`` wrote it, carried by a handoff from ``carried``
        (a row an earlier handoff had carried keeps its own mark)."""
        return cls(
            int(data["idx"]),
            str(data["kind"]),
            dict(data["message"]),
            int(data["tokens"]),
            data.get("covers_until"),
            data.get("meta"),
            from_iso(str(data["created_at"])),
            dict(data.get("carried") or carried),
        )


Blobs = BlobStore | Offloader | MessageReader | None


def reader_of(store: Store, blobs: Blobs) -> MessageReader:
    """The reader for messages of ``store`` offloaded to ``blobs`` (or the default)."""
    if isinstance(blobs, MessageReader):
        return blobs
    return MessageReader(blobs, store_url=store.url)


def carried_history(
    store: Store, task_id: str, name: str = "main", *, blobs: Blobs = None
) -> list[StoredMessage]:
    """The rows of the archive a handoff carried into conversation ``name``
    (started with ``start_from=doc`` from ``conv.handoff(archive=...)``), oldest
    first, each marked ``carried``; [] if it carried none."""
    reader = reader_of(store, blobs)
    first = reader.read(store.load_messages(task_id, name, 0, 1))
    meta = StoredMessage.of(first[0]).meta if first else None
    origin = (meta or {}).get("handoff")
    if not isinstance(origin, Mapping):
        return []
    mark = {key: origin.get(key) for key in ("task_id", "conversation", "created_at")}
    return [StoredMessage.from_json(row, mark) for row in archived_rows(origin, reader.load)]


def iter_history(
    store: Store,
    task_id: str,
    name: str,
    *,
    start: int = 0,
    blobs: Blobs = None,
    carried: bool = True,
) -> Iterator[StoredMessage]:
    """Every row of conversation ``name``, oldest first, read ``PAGE`` rows at a
    time; from ``start`` = 0 and with ``carried``, the rows a handoff carried
    come first (``carried_history``)."""
    reader = reader_of(store, blobs)
    if carried and start == 0:
        yield from carried_history(store, task_id, name, blobs=reader)
    position = start
    while True:
        page = reader.read(store.load_messages(task_id, name, position, PAGE))
        for record in page:
            yield StoredMessage.of(record)
        if len(page) < PAGE:
            return
        position = page[-1].idx + 1


def export_jsonl(rows: Iterator[StoredMessage], out: IO[str]) -> int:
    """Write ``rows`` as JSON Lines (one row per line); returns how many."""
    count = 0
    for row in rows:
        out.write(json.dumps(row.to_json(), ensure_ascii=False) + "\n")
        count += 1
    return count


@dataclass(frozen=True, slots=True)
class ConversationView:
    """A conversation's active context as stored, read outside any task.

    ``parsed`` are the rows of the active context in memory, in order;
    ``stored`` adds each row's time, read from ``store`` when asked for (the
    dashboard's archive view), not on every load: rows are never rewritten, so
    the times of these positions are the ones they were written with.
    """

    task_id: str
    name: str
    window: Window
    rows: int
    parsed: tuple[Row, ...]
    store: Store

    @property
    def counter_recorded(self) -> bool:
        """True if a reply row of the active context records its counter (a
        ``ctx.llm`` call's does)."""
        return any(row.meta is not None and "counter" in row.meta for row in self.parsed)

    @property
    def counted_by(self) -> str:
        """What counted the tokens between model calls, as the latest reply row
        recorded it (``o200k_base (exact)``, ``estimate``: ``cairn.agent.tokens``);
        at each call the provider's count replaces it."""
        for row in reversed(self.parsed):
            if row.meta is not None and "counter" in row.meta:
                return f"{row.meta['counter']}, the provider's at each call"
        return "not recorded (no model call yet)"

    @property
    def stored(self) -> tuple[StoredMessage, ...]:
        """The active rows as the archive shows them (sharing the parsed messages)."""
        records = self.store.load_active_messages(self.task_id, self.name)
        times = {record.idx: record.created_at for record in records}
        return tuple(
            StoredMessage(
                row.idx,
                row.kind,
                row.message,
                row.tokens,
                row.covers_until,
                row.meta,
                times[row.idx],
            )
            for row in self.parsed
        )

    @property
    def messages(self) -> list[Message]:
        return self.window.messages()

    @property
    def summary(self) -> str | None:
        row = self.window.summary
        return None if row is None else summary_text(row.message)

    @property
    def stats(self) -> ConversationStats:
        return stats_of(self.window, self.rows)

    def active_rows(self) -> list[StoredMessage]:
        """The stored rows of the active context, in the order the model sees them."""
        by_idx = {stored.idx: stored for stored in self.stored}
        return [by_idx[row.idx] for row in self.window.rows()]

    def handoff(
        self, metadata: Mapping[str, Any] | None = None, *, now: datetime, archive: Any = None
    ) -> dict[str, Any]:
        """The handoff document; ``archive`` its archive part (``archive_part``)."""
        return build_handoff(
            self.task_id, self.name, self.window, self.stats, metadata, now, archive
        )


def load_conversation(
    store: Store, task_id: str, name: str = "main", *, blobs: Blobs = None
) -> ConversationView | None:
    """The stored active context of conversation ``name``, or None if it has no rows.
    Reads only the active rows, however long the conversation has grown."""
    stored = reader_of(store, blobs).read_rows(store.load_active_rows(task_id, name), task_id, name)
    if not stored:
        return None
    rows = rows_of(stored)
    return ConversationView(
        task_id, name, Window.from_rows(rows), rows[-1].idx + 1, tuple(rows), store
    )
