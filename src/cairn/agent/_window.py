"""The active context as rows, and where compaction may cut it (pure logic).

The active context is the system prompt (row 0), the latest summary, and the
messages after the summary's ``covers_until``: the *tail*. Compaction folds a
head of the tail into a new summary and keeps the rest, so the cut must leave at
least ``keep_tail`` tokens after it, and must never fall between an assistant
message that calls tools and the tool results that answer it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from cairn.agent.clearing import Cleared, placeholder, tool_names
from cairn.agent.messages import SYSTEM_ROLES, Message
from cairn.store.records import ActiveRow, MessageRecord

# The decoder's own entry point: json.loads adds two calls and a type check per
# message, which a thousand-message load feels.
_loads = json.JSONDecoder().decode


class Row(NamedTuple):
    """One conversation row in memory: its position, message and token count.

    A named tuple, not a frozen dataclass: a resumed conversation builds one per
    stored row, and a tuple is made in a third of the time a frozen dataclass's
    ``__init__`` takes (``bench.conversation``'s load compares with the Agents SDK).
    """

    idx: int
    message: Message
    tokens: int
    kind: str = "message"
    covers_until: int | None = None
    meta: dict[str, Any] | None = None

    @property
    def role(self) -> str:
        return str(self.message["role"])

    @property
    def cleared(self) -> bool:
        """True for a tool result replaced in the window by its placeholder."""
        return self.meta is not None and "cleared_tokens" in self.meta

    @property
    def full_tokens(self) -> int:
        """Tokens of the message as stored (a cleared one's original size)."""
        return int(self.meta["cleared_tokens"]) if self.cleared else self.tokens  # type: ignore[index]

    @classmethod
    def of(cls, record: MessageRecord) -> Row:
        meta = record.meta
        return cls(
            record.idx,
            _loads(record.content),
            record.tokens,
            record.kind,
            record.covers_until,
            None if meta is None else _loads(meta),
        )


def rows_of(stored: Iterable[ActiveRow]) -> list[Row]:
    """The rows of a resumed conversation from what the store read (offloaded
    messages already read back), in one loop: a resume reads every active row.
    Each ``Row`` is made by ``tuple.__new__`` with all six fields, skipping the
    named tuple's Python-level ``__new__``."""
    loads, new = _loads, tuple.__new__
    rows: list[Row] = []
    for idx, message, tokens, kind, covers_until, meta in stored:
        if type(message) is not dict:
            raise ValueError(f"message {idx} is in the blob store and was not read back")
        parsed = None if meta is None else loads(meta)
        rows.append(new(Row, (idx, message, tokens, kind, covers_until, parsed)))
    return rows


@dataclass
class Window:
    """The active context, as it stands at one point of the conversation."""

    system: Row | None = None
    summary: Row | None = None
    tail: list[Row] = field(default_factory=list)

    @property
    def covers_until(self) -> int:
        """The last position the summary stands in for (0: nothing summarized)."""
        if self.summary is None or self.summary.covers_until is None:
            return 0
        return self.summary.covers_until

    def rows(self) -> list[Row]:
        head = [r for r in (self.system, self.summary) if r is not None]
        return head + self.tail

    def messages(self) -> list[Message]:
        return [row.message for row in self.rows()]

    def tokens(self) -> int:
        return sum(row.tokens for row in self.rows())

    def clear(self, cleared: Cleared) -> None:
        """Replace the tool results ``cleared`` names ([idx, placeholder tokens])
        by their placeholders (``cairn.agent.clearing``); those no longer in the
        tail, or cleared already, are left as they are."""
        wanted = {int(idx): int(tokens) for idx, tokens in cleared}
        names = tool_names(row.message for row in self.tail)
        for at, row in enumerate(self.tail):
            if row.idx not in wanted or row.cleared:
                continue
            tool = names.get(str(row.message.get("tool_call_id")))
            message = placeholder(row.message, row.tokens, tool)
            meta = {"cleared_tokens": row.tokens}
            self.tail[at] = Row(row.idx, message, wanted[row.idx], row.kind, None, meta)

    def add(self, row: Row) -> None:
        """Take in the row at the next position, as the conversation did (a reply
        first clears the tool results its call's context had cleared)."""
        if row.meta is not None and row.meta.get("cleared"):
            self.clear(row.meta["cleared"])
        if row.kind == "summary":
            self.summary = row
            cut = self.covers_until
            self.tail = [r for r in self.tail if r.idx > cut]
        elif row.idx == 0 and row.role in SYSTEM_ROLES:
            self.system = row
        else:
            self.tail.append(row)

    @classmethod
    def from_rows(cls, rows: Iterable[Row]) -> Window:
        """The window from the rows of the active context, in idx order."""
        ordered = list(rows)
        window = cls()
        summaries = [r for r in ordered if r.kind == "summary"]
        latest = summaries[-1] if summaries else None
        # Without a summary nothing is cut: row 0 is in the tail unless it is the system prompt.
        cut = -1 if latest is None or latest.covers_until is None else latest.covers_until
        for row in ordered:
            if row.kind == "summary":
                continue
            if row.idx == 0 and row.role in SYSTEM_ROLES:
                window.system = row
            elif row.idx > cut:
                window.tail.append(row)
        window.summary = latest
        for row in list(window.tail):
            if row.meta is not None and row.meta.get("cleared"):
                window.clear(row.meta["cleared"])
        return window


def split_point(tail: Sequence[Row], keep_tail: int) -> int:
    """Where to cut ``tail``: the index of the first row kept. 0 means nothing can be
    folded away. The kept part holds at least ``keep_tail`` tokens and starts
    neither with a tool result nor right after unanswered tool calls."""
    kept, cut = 0, len(tail)
    while cut > 0 and kept < keep_tail:
        cut -= 1
        kept += tail[cut].tokens
    # A tool result must stay with the assistant message that called it.
    while 0 < cut < len(tail) and tail[cut].role == "tool":
        cut -= 1
    return cut


def tool_pairs_intact(messages: Sequence[Message]) -> bool:
    """True if every tool result follows the assistant message that called it
    (with only other results of the same message in between)."""
    open_calls: set[str] = set()
    for message in messages:
        if message["role"] == "tool":
            if message.get("tool_call_id") not in open_calls:
                return False
            continue
        open_calls = {str(c.get("id")) for c in message.get("tool_calls") or ()}
    return True
