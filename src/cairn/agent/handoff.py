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
     "metadata": { ...anything JSON the caller added... },
     "archive": {"rows": [...every stored row, as cairn conversation --jsonl writes it...]}
              | {"blob": "!blob:{...}", "rows": 812}}     (only if asked for)

``conv.handoff(archive="inline")`` puts the archive (every row up to this point,
the compacted head included) in the document; ``archive="blob"`` writes it to the
app's blob store and puts the reference there. A conversation started from a
document with an archive keeps it (in its own blob store, when it has one: its
first row's meta names the blob, and ``cairn export``, ``cairn backup`` and
``cairn gc`` see that reference), so Day 2 can read Day 1's head on any store:
``conv.history()``, ``iter_history`` and ``cairn conversation --all`` show it
first, each row marked as carried (``cairn.agent.archive.carried_history``),
``handoff_archive`` gives its messages, and ``cairn fidelity`` compares Day 2 against
Day 1's archive followed by Day 2's own messages.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
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


ARCHIVE_MODES = ("inline", "blob")
Offload = Callable[[str], str]


def archive_part(rows: list[dict[str, Any]], mode: str | None, offload: Offload | None) -> Any:
    """The document's ``archive`` for ``rows`` (stored rows as JSON): inline, a
    blob reference, or None when not asked for."""
    if mode is None:
        return None
    if mode not in ARCHIVE_MODES:
        raise ValueError(f"archive must be 'inline', 'blob' or None, not {mode!r}")
    if mode == "inline":
        return {"rows": rows}
    if offload is None:
        raise ValueError(
            "archive='blob' needs a blob store, and this app has none configured "
            "(Cairn(blobs=...) or CAIRN_BLOBS); or use archive='inline'"
        )
    text = json.dumps({"rows": rows}, ensure_ascii=False, separators=(",", ":"))
    return {"blob": offload(text), "rows": len(rows)}


def build_handoff(
    task_id: str,
    name: str,
    window: Window,
    stats: ConversationStats,
    metadata: Mapping[str, Any] | None,
    now: datetime,
    archive: Any = None,
) -> dict[str, Any]:
    """The handoff document of ``window`` (see the module doc); ``archive`` is
    its ``archive`` part (``archive_part``), if any."""
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
    if archive is not None:
        doc["archive"] = archive
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
    system: str | Mapping[str, Any] | None,
    start_from: Any,
    counter: TokenCounter,
    offload: Offload | None = None,
) -> list[Row]:
    """The rows a new conversation starts with: its system prompt, and what a
    handoff document carries (summary, then tail). An inline archive goes to the
    blob store through ``offload`` when there is one (its first row's meta then
    holds the reference, not the whole archive)."""
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
        meta = {**(first.meta or {}), "handoff": _origin(doc, len(rows), offload)}
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


def _origin(doc: Mapping[str, Any], seeded: int, offload: Offload | None) -> dict[str, Any]:
    origin = {
        "task_id": doc.get("task_id"),
        "conversation": doc.get("conversation"),
        "created_at": doc.get("created_at"),
        "counts": doc.get("counts") or {},
        "metadata": doc.get("metadata") or {},
        # How many rows the document seeded: fidelity's full history is the
        # archive followed by the rows after these.
        "seeded_rows": seeded,
    }
    archive = doc.get("archive")
    if isinstance(archive, Mapping):
        rows = archive.get("rows")
        if isinstance(rows, list) and offload is not None:
            archive = archive_part(rows, "blob", offload)
        origin["archive"] = dict(archive)
    return origin


def archived_rows(
    origin: Mapping[str, Any], load: Callable[[str], str] | None = None
) -> list[dict[str, Any]]:
    """The stored rows (as ``cairn conversation --jsonl`` writes them) of the
    archive a handoff carried: ``origin`` is what the first row of the
    conversation it started recorded (``conv.handed_off``); an archive in the
    blob store is read with ``load``. [] if it carried none."""
    archive = origin.get("archive")
    if not isinstance(archive, Mapping):
        return []
    if "blob" not in archive:
        return list(archive.get("rows") or [])
    if load is None:
        raise ValueError(
            "this handoff's archive is in the blob store; pass a blob reader "
            "(blobs=... to carried_history, or load= to handoff_archive)"
        )
    rows: list[dict[str, Any]] = json.loads(load(str(archive["blob"])))["rows"]
    return rows


def handoff_archive(
    origin: Mapping[str, Any], load: Callable[[str], str] | None = None
) -> list[Message]:
    """The messages (summaries left out) of the archive a handoff carried, oldest
    first: ``origin`` is ``conv.handed_off`` (what the first row of the
    conversation it started recorded); ``load`` reads a blob reference (needed
    only for ``archive="blob"``). [] if it carried none."""
    return [
        normalize(row["message"])
        for row in archived_rows(origin, load)
        if row.get("kind") == "message"
    ]
