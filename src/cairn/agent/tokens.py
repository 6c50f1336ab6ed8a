"""Token counts: the provider's when it reports them, an estimate otherwise.

``TokenCounter`` is the extension point: anything with ``count(text) -> int``.
The default, ``EstimateCounter``, needs no tokenizer and no download. It is an
estimate, documented as one:

* ASCII text (English, code, JSON): about 4 characters per token.
* Chinese, Japanese and Korean: about 1 token per character. Those scripts pack
  far fewer characters into a token than English does, so counting them like
  English would under-count them several times over and compact far too late.
* Other scripts (Cyrillic, Greek, Arabic, Devanagari, accented Latin, emoji):
  about 2 characters per token.
* Each message adds 4 tokens for its framing, each tool call 4 more.

Real tokenizers differ by model (o200k packs CJK tighter than cl100k). Measured
against o200k_base and cl100k_base (``bench.token_estimate``, docs/agents.md):
English prose and code within a few percent in total, JSON about 14% under,
Japanese about 24% over with o200k and within 3% with cl100k. Where a provider
reports usage cairn uses that instead (see ``Conversation.tokens``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

MESSAGE_OVERHEAD = 4
TOOL_CALL_OVERHEAD = 4

# CJK ideographs (with extension A and compatibility), kana, hangul, CJK
# punctuation, and full-width forms.
_CJK = re.compile(
    "[\u3000-\u303f\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]"
)


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens of a text; plug in a real tokenizer if you have one."""

    def count(self, text: str) -> int: ...


class EstimateCounter:
    """An estimate that is sane for English and for CJK text (see the module doc)."""

    def count(self, text: str) -> int:
        if not text:
            return 0
        if text.isascii():
            return math.ceil(len(text) / 4)
        ascii_chars = len(text.encode("ascii", "ignore"))
        cjk = len(_CJK.findall(text))
        other = len(text) - ascii_chars - cjk
        return math.ceil(ascii_chars / 4) + cjk + math.ceil(other / 2)


DEFAULT_COUNTER = EstimateCounter()


def count_message(message: Mapping[str, Any], counter: TokenCounter = DEFAULT_COUNTER) -> int:
    """Tokens a message takes in a prompt: its text, its tool calls, its framing."""
    total = MESSAGE_OVERHEAD
    content = message.get("content")
    if isinstance(content, str):
        total += counter.count(content)
    elif isinstance(content, Sequence):
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                total += counter.count(part["text"])
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        total += TOOL_CALL_OVERHEAD + counter.count(str(function.get("name", "")))
        total += counter.count(str(function.get("arguments", "")))
    return total


def count_messages(
    messages: Sequence[Mapping[str, Any]], counter: TokenCounter = DEFAULT_COUNTER
) -> int:
    return sum(count_message(m, counter) for m in messages)
