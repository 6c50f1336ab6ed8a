"""Handoff: a conversation's compressed state as a portable JSON document.

``conv.handoff()`` writes it; ``ctx.conversation(name, start_from=doc)`` starts
a new conversation, usually in a new task (the Day 2 agent), from it. The
document holds no secrets and nothing store-specific::

    {"format": "cairn.handoff", "version": 1,
     "task_id": "day1", "conversation": "main", "created_at": "2026-05-24T...+00:00",
     "system": {"role": "system", "content": "..."} | null,
     "summary": "Goal: ..." | null,
     "tail": [ ...messages in the OpenAI chat shape... ],
     "counts": {"rows": 812, "compactions": 9, "archived_messages": 760,
                "archived_tokens": 91000, "active_tokens": 4100, "full_tokens": 95000},
     "metadata": { ...anything JSON the caller added... }}
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict
from datetime import datetime
from typing import Any

from cairn.agent._window import Row, Window, tool_pairs_intact
from cairn.agent.conversation_stats import ConversationStats
from cairn.agent.messages import Message, normalize
from cairn.agent.messages import system as system_message
from cairn.agent.summarize import summary_message, summary_text
from cairn.agent.tokens import TokenCounter, count_message
from cairn.clock import to_iso

FORMAT = "cairn.handoff"
VERSION = 1


def build_handoff(
    task_id: str,
    name: str,
    window: Window,
    stats: ConversationStats,
    metadata: Mapping[str, Any] | None,
    now: datetime,
) -> dict[str, Any]:
    """The handoff document of ``window`` (see the module doc)."""
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "task_id": task_id,
        "conversation": name,
        "created_at": to_iso(now),
        "system": None if window.system is None else window.system.message,
        "summary": None if window.summary is None else summary_text(window.summary.message),
        "tail": [row.message for row in window.tail],
        "counts": asdict(stats),
        "metadata": dict(metadata or {}),
    }
    json.dumps(doc)  # fail here, not in the reader, if metadata is not JSON
    return doc


def parse_handoff(doc: Mapping[str, Any] | str) -> dict[str, Any]:
    """A handoff document (a dict or its JSON text), checked."""
    data: Any = json.loads(doc) if isinstance(doc, str) else dict(doc)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError("not a cairn handoff document (its format is not 'cairn.handoff')")
    if data.get("version") != VERSION:
        raise ValueError(
            f"handoff document version {data.get('version')!r}; this cairn reads {VERSION}"
        )
    tail = [normalize(m) for m in data.get("tail") or []]
    if not tool_pairs_intact(tail):
        raise ValueError("the handoff tail starts with a tool result whose call it lacks")
    data["tail"] = tail
    return data


def seed_rows(
    system: str | Mapping[str, Any] | None, start_from: Any, counter: TokenCounter
) -> list[Row]:
    """The rows a new conversation starts with: its system prompt, and what a
    handoff document carries (summary, then tail)."""
    messages: list[tuple[Message, str]] = []
    doc = None if start_from is None else parse_handoff(start_from)
    prompt: Any = system if system is not None else (doc or {}).get("system")
    if prompt is not None:
        plain = system_message(prompt) if isinstance(prompt, str) else normalize(prompt)
        messages.append((plain, "message"))
    if doc is not None and doc.get("summary"):
        messages.append((summary_message(str(doc["summary"])), "summary"))
    if doc is not None:
        messages += [(m, "message") for m in doc["tail"]]
    rows = [
        _seed_row(idx, message, kind, counter, doc) for idx, (message, kind) in enumerate(messages)
    ]
    if doc is not None and rows:
        first = rows[0]
        meta = {**(first.meta or {}), "handoff": _origin(doc)}
        rows[0] = Row(first.idx, first.message, first.tokens, first.kind, first.covers_until, meta)
    return rows


def _seed_row(
    idx: int, message: Message, kind: str, counter: TokenCounter, doc: dict[str, Any] | None
) -> Row:
    tokens = count_message(message, counter)
    if kind != "summary" or doc is None:
        return Row(idx, message, tokens)
    counts = doc.get("counts") or {}
    # What the earlier task had folded away still counts as history not resent.
    meta = {
        "archived_tokens": int(counts.get("archived_tokens", 0)),
        "archived_messages": int(counts.get("archived_messages", 0)),
        "compactions": 0,
    }
    return Row(idx, message, tokens, "summary", 0, meta)


def _origin(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "task_id": doc.get("task_id"),
        "conversation": doc.get("conversation"),
        "created_at": doc.get("created_at"),
        "counts": doc.get("counts") or {},
        "metadata": doc.get("metadata") or {},
    }
