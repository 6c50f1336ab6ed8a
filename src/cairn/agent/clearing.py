"""Tool-result clearing: old tool results in the active context become a short
placeholder, the way Anthropic's ``clear_tool_uses`` and LangChain's context
editing do; the stored rows (the archive) keep the originals.

    conv = ctx.conversation("main", clear_tool_results=ToolResultClearing(keep=3))

Before each ``ctx.llm(conv)`` call (after compacting, if that was due), every
tool result but the ``keep`` most recent, except those of the ``exclude`` tools
and those under ``min_tokens``, is replaced in the context sent by a placeholder
saying what was there. A tool result that fills the context is then gone from
it a few calls later, instead of staying until compaction reaches it.

Where the decision is recorded: in the reply row of the call it came before
(its ``meta["cleared"]``: each cleared row's idx and its placeholder's tokens),
committed with the reply in one statement. Replay applies the recorded list
where the reply is taken, and opening a conversation applies the lists of the
rows it reads, so the cleared context is the same on replay, after a crash, and
in ``cairn conversation``, whatever the policy says by then. A crash before the
reply row commits recorded nothing, and the same rows and policy decide the same
list again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cairn.agent.messages import Message
from cairn.agent.tokens import TokenCounter, count_message

PLACEHOLDER = (
    "[tool result cleared from the context to save tokens: {tokens} tokens of "
    "{tool} output; the original is kept in the conversation's archive]"
)
Cleared = list[list[int]]  # [[idx, placeholder tokens], ...], as recorded


@dataclass(frozen=True, slots=True)
class ToolResultClearing:
    """Which tool results to clear: all but the ``keep`` most recent (counted
    among those that may be cleared), never those of the tools named in
    ``exclude``, never one under ``min_tokens`` tokens (its placeholder would
    save next to nothing)."""

    keep: int = 3
    exclude: frozenset[str] = frozenset()
    min_tokens: int = 100

    def __post_init__(self) -> None:
        if self.keep < 0 or self.min_tokens < 0:
            raise ValueError(
                f"ToolResultClearing(keep={self.keep}, min_tokens={self.min_tokens}): "
                "both must be zero or more"
            )
        object.__setattr__(self, "exclude", frozenset(self.exclude))


def placeholder(message: Message, tokens: int, tool: str | None) -> Message:
    """The message standing in for a cleared tool result (same tool_call_id)."""
    text = PLACEHOLDER.format(tokens=tokens, tool=tool or "the tool's")
    return {"role": "tool", "tool_call_id": message.get("tool_call_id"), "content": text}


def tool_names(messages: Iterable[Message]) -> dict[str, str]:
    """tool_call_id → tool name, from the assistant messages that made the calls."""
    names: dict[str, str] = {}
    for message in messages:
        for call in message.get("tool_calls") or ():
            names[str(call.get("id"))] = str((call.get("function") or {}).get("name"))
    return names


def to_clear(
    policy: ToolResultClearing,
    rows: Sequence[tuple[int, Message, int, bool]],
    counter: TokenCounter,
) -> Cleared:
    """The tool results ``policy`` clears now among ``rows`` (idx, message,
    tokens, already cleared), oldest first, each with its placeholder's tokens."""
    names = tool_names(message for _, message, _, _ in rows)
    candidates = [
        (idx, message, tokens, done)
        for idx, message, tokens, done in rows
        if message.get("role") == "tool"
        and names.get(str(message.get("tool_call_id"))) not in policy.exclude
    ]
    older = candidates[: max(0, len(candidates) - policy.keep)]
    cleared: Cleared = []
    for idx, message, tokens, done in older:
        if done or tokens < policy.min_tokens:
            continue
        tool = names.get(str(message.get("tool_call_id")))
        cleared.append([idx, count_message(placeholder(message, tokens, tool), counter)])
    return cleared
