"""What a recorded model call hands back: the reply, its usage and its cost."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cairn.agent.messages import Message
from cairn.agent.pricing import Usage


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call of a reply. ``arguments`` is the JSON text the model wrote."""

    id: str
    name: str
    arguments: str

    @property
    def args(self) -> dict[str, Any]:
        """The arguments parsed; {} when the model wrote something that is not a JSON
        object (the raw text stays in ``arguments``)."""
        try:
            value = json.loads(self.arguments or "{}")
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True)
class Reply:
    """A model's reply as recorded: on replay the same object comes back, and
    nothing is sent. ``idx`` is its position in the conversation, if it has one."""

    message: Message
    usage: Usage
    model: str | None
    cost: float | None
    provider: str | None = None
    finish_reason: str | None = None
    idx: int | None = None

    @property
    def content(self) -> str | None:
        content = self.message.get("content")
        return content if isinstance(content, str) else None

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [
            ToolCall(
                str(call.get("id")),
                str(call["function"]["name"]),
                str(call["function"].get("arguments") or ""),
            )
            for call in self.message.get("tool_calls") or ()
        ]

    @classmethod
    def from_record(cls, message: Message, meta: Mapping[str, Any]) -> Reply:
        return cls(
            message,
            Usage.from_dict(meta.get("usage")),
            meta.get("model"),
            meta.get("cost"),
            meta.get("provider"),
            meta.get("finish_reason"),
            meta.get("idx"),
        )
