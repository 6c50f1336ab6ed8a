"""Messages in the OpenAI chat shape: checking them, writing them, building them.

A message is a plain dict, as the OpenAI chat API takes it::

    {"role": "user", "content": "Summarize the report."}
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "read_file", "arguments": "{\\"path\\": \\"a.txt\\"}"}}]}
    {"role": "tool", "tool_call_id": "call_1", "content": "..."}

cairn stores each one as compact JSON, exactly as given, and hands it back the
same. Pydantic messages from the openai SDK are accepted and turned into dicts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

Message = dict[str, Any]

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
SYSTEM_ROLES = frozenset({"system", "developer"})

_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def normalize(message: Mapping[str, Any] | Any) -> Message:
    """``message`` as a plain JSON-ready dict, checked; raises ValueError if it is not
    a chat message."""
    if not isinstance(message, Mapping):
        dump = getattr(message, "model_dump", None)
        if dump is None:
            raise ValueError(f"a message is a dict in the OpenAI chat shape, not {message!r}")
        message = dump(exclude_none=True)
    role = message.get("role")
    if role not in ROLES:
        raise ValueError(
            f"message role must be one of {', '.join(sorted(ROLES))}, not {role!r}: {message!r}"
        )
    if role == "tool" and not message.get("tool_call_id"):
        raise ValueError(f"a tool message needs the tool_call_id it answers: {message!r}")
    if all(type(value) is str or value is None for value in message.values()):
        return dict(message)  # the common case, already plain: no round trip
    try:
        # A round trip through JSON: tuples become lists, and what cannot be
        # stored fails here, before anything is written.
        plain: Message = json.loads(_ENCODER.encode(dict(message)))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"message cannot be stored as JSON ({exc}): {message!r}") from exc
    return plain


def dumps(message: Message) -> str:
    """The stored form: compact JSON, non-ASCII kept as is."""
    return _ENCODER.encode(message)


def text_of(message: Mapping[str, Any]) -> str:
    """The readable text of a message: its content, and any tool calls it makes."""
    parts: list[str] = []
    content = message.get("content")
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, Sequence):
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        parts.append(f"{function.get('name', '?')}({function.get('arguments', '')})")
    return "\n".join(parts)


def tool_call_ids(message: Mapping[str, Any]) -> list[str]:
    """The ids of the tool calls an assistant message makes."""
    return [str(call.get("id")) for call in message.get("tool_calls") or ()]


# -- building messages -------------------------------------------------------------------
def system(text: str) -> Message:
    """A system prompt."""
    return {"role": "system", "content": text}


def user(text: str) -> Message:
    """A user message."""
    return {"role": "user", "content": text}


def assistant(text: str | None, tool_calls: Sequence[Mapping[str, Any]] = ()) -> Message:
    """An assistant message, with tool calls if it makes any."""
    message: Message = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = [dict(call) for call in tool_calls]
    return message


def tool_call(call_id: str, name: str, arguments: Mapping[str, Any] | str) -> Message:
    """One entry of an assistant message's ``tool_calls``."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def tool_result(call_id: str, content: Any) -> Message:
    """The answer to tool call ``call_id``; non-text content is written as JSON."""
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    return {"role": "tool", "tool_call_id": call_id, "content": text}
