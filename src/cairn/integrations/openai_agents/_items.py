"""Agents SDK items (the Responses API's input items) as conversation messages.

A cairn conversation holds messages in the OpenAI chat shape, which its token
counts, compaction and summarizers read. An item with a role (a user, system
or assistant message) is such a message already and is stored as it is. The
others are stored in a chat-shaped envelope that carries the items themselves
under ``cairn_items``: function calls as an assistant message with
``tool_calls`` (the function calls of one batch in one envelope, so compaction
never cuts between calls made together), a function call's output as a
``tool`` message, anything else (reasoning, hosted tool calls) as an assistant
message without text. Reading gives the items back exactly as they were added.

A ``pop_item`` is a marker row naming the item it removes, since rows are never
rewritten; the markers are ``developer`` messages with no text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from cairn.agent.messages import ROLES, Message

ITEMS = "cairn_items"
POP = "cairn_pop"


def _function_call(item: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": str(item.get("call_id")),
        "type": "function",
        "function": {"name": str(item.get("name")), "arguments": str(item.get("arguments"))},
    }


def _output_text(output: Any) -> str:
    return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)


def _envelope(item: dict[str, Any]) -> Message:
    kind = item.get("type")
    if kind == "function_call_output":
        return {
            "role": "tool",
            "tool_call_id": str(item.get("call_id")),
            "content": _output_text(item.get("output")),
            ITEMS: [item],
        }
    return {"role": "assistant", "content": None, ITEMS: [item]}


def messages_of(items: Iterable[Any]) -> list[Message]:
    """The conversation messages that store ``items``, in order."""
    messages: list[Message] = []
    calls: list[dict[str, Any]] = []
    for raw in items:
        item = _plain(raw)
        if item.get("type") == "function_call":
            calls.append(item)
            continue
        if calls:
            messages.append(_calls(calls))
            calls = []
        if item.get("role") in ROLES:
            messages.append(item)
        else:
            messages.append(_envelope(item))
    if calls:
        messages.append(_calls(calls))
    return messages


def _calls(calls: list[dict[str, Any]]) -> Message:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [_function_call(c) for c in calls],
        ITEMS: list(calls),
    }


def _plain(item: Any) -> dict[str, Any]:
    if isinstance(item, Mapping):
        return dict(item)
    dump = getattr(item, "model_dump", None)
    if dump is None:
        raise ValueError(f"an Agents SDK session item is a dict (an input item), not {item!r}")
    plain: dict[str, Any] = dump(exclude_unset=True)
    return plain


def pop_marker(idx: int, position: int) -> Message:
    """The row that removes the item at ``position`` of the row at ``idx``."""
    return {"role": "developer", "content": "", POP: [idx, position]}


def items_of(rows: Iterable[tuple[int, Message]]) -> list[tuple[int, int, dict[str, Any]]]:
    """The session's items, as (row idx, position in the row, item), from the
    active rows (idx, message) in order; pop markers applied."""
    found: list[tuple[int, int, dict[str, Any]]] = []
    for idx, message in rows:
        if POP in message:
            target = tuple(message[POP])
            found = [entry for entry in found if (entry[0], entry[1]) != target]
        elif ITEMS in message:
            found.extend((idx, k, dict(item)) for k, item in enumerate(message[ITEMS]))
        else:
            found.append((idx, 0, dict(message)))
    return found
