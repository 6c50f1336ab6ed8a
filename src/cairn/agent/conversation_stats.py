"""Counts of one conversation, read from its active window.

Both a live ``Conversation`` and a ``ConversationView`` read outside a task
report them, so they live here, below both.
"""

from __future__ import annotations

from dataclasses import dataclass

from cairn.agent._window import Window


@dataclass(frozen=True, slots=True)
class ConversationStats:
    """Counts of one conversation. ``full_tokens`` is what the context would hold
    without compaction: every message ever appended (an estimate).
    ``short_compactions``: compactions that wrote a summary but left the context
    within a tenth of the threshold (logged, and followed by a hold).
    ``fallback_compactions``: compactions whose summary is the extractive
    fallback's, the context being over its bound (``cairn.agent.fallback``)."""

    rows: int
    compactions: int
    archived_messages: int
    archived_tokens: int
    active_tokens: int
    full_tokens: int
    short_compactions: int = 0
    cleared_results: int = 0  # tool results in the active context cleared to placeholders
    fallback_compactions: int = 0


def stats_of(window: Window, rows: int) -> ConversationStats:
    """The counts of a conversation of ``rows`` stored rows whose active context is
    ``window``; the archived counts are those the latest summary carries."""
    meta = (window.summary.meta if window.summary is not None else None) or {}
    active = window.tokens()
    message_tokens = sum(r.full_tokens for r in window.rows() if r.kind == "message")
    archived = int(meta.get("archived_tokens", 0))
    return ConversationStats(
        rows=rows,
        compactions=int(meta.get("compactions", 0)),
        archived_messages=int(meta.get("archived_messages", 0)),
        archived_tokens=archived,
        active_tokens=active,
        full_tokens=archived + message_tokens,
        short_compactions=int(meta.get("short_compactions", 0)),
        cleared_results=sum(1 for r in window.tail if r.cleared),
        fallback_compactions=int(meta.get("fallback_compactions", 0)),
    )
