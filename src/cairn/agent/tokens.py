"""Token counts: the provider's when it reports them, exact with a real encoding,
an estimate otherwise.

Which count a conversation uses
-------------------------------
* The provider's count, whenever a call reports one: after each model call the
  conversation's ``tokens`` is the prompt tokens the provider counted plus what
  was appended since (``Conversation.tokens``), and costs come from the
  provider's usage (``cairn.agent.costs``).
* For what came after the last call (and before the first), ``counter``: with
  the ``tokens`` extra installed (``pip install 'cairn-durable[tokens]'``) and a
  conversation opened for an OpenAI model (``ctx.conversation(..., model="gpt-4o")``
  or ``counter=counter_for("gpt-4o")``), an ``ExactCounter`` on that model's
  encoding (``encoding_for_model``), which counts a message as OpenAI does; the
  ``EstimateCounter`` otherwise. A conversation opened naming neither a model
  nor a counter takes each ``ctx.llm`` call's model from that call on
  (``Conversation.count_for``). ``describe_counter`` names the one in use; each
  reply row records it (its meta's ``counter``) and ``cairn conversation`` shows it.

``TokenCounter`` is the extension point: anything with ``count(text) -> int``.

The estimate
------------
``EstimateCounter`` needs no tokenizer and no download. It is an estimate,
documented as one:

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
Japanese about 24% over with o200k and within 3% with cl100k.

Exact counts
------------
``ExactCounter`` encodes with the ``bpe-openai`` package, whose wheel ships the
``o200k_base`` and ``cl100k_base`` encoding files (tiktoken downloads them the
first time it runs, which cairn never does). A message counts as OpenAI's
cookbook counts a chat prompt: 3 tokens of framing, its role's tokens, its
content's, and a ``name``'s tokens plus 1; a prompt adds 3 for the reply's
priming (``count_messages``). Tool calls have no published rule: their text
is encoded exactly, their framing is estimated (4 per call).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import math
import re
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

MESSAGE_OVERHEAD = 4
TOOL_CALL_OVERHEAD = 4

# CJK ideographs (with extension A and compatibility), kana, hangul, CJK
# punctuation, and full-width forms.
_CJK = re.compile(
    "[\u3000-\u303f\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]"
)

# Model name prefixes and their encodings, the longest prefix first wins
# (gpt-4o before gpt-4). Fine-tuned names ("ft:gpt-4o-mini:org::id") and a
# provider prefix ("openai/gpt-4o") are looked up by the base model.
OPENAI_ENCODINGS: tuple[tuple[str, str], ...] = (
    ("gpt-5", "o200k_base"),
    ("gpt-4.5", "o200k_base"),
    ("gpt-4.1", "o200k_base"),
    ("gpt-4o", "o200k_base"),
    ("chatgpt-4o", "o200k_base"),
    ("o1", "o200k_base"),
    ("o3", "o200k_base"),
    ("o4", "o200k_base"),
    ("gpt-4", "cl100k_base"),
    ("gpt-3.5", "cl100k_base"),
    ("gpt-35", "cl100k_base"),  # Azure's spelling
)
_EXTRA = "bpe_openai"


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens of a text; plug in a real tokenizer if you have one."""

    def count(self, text: str) -> int: ...


@dataclass(frozen=True, slots=True)
class Framing:
    """The tokens a message costs besides its text: ``per_message``, its role's
    own tokens if ``role``, a ``name``'s tokens plus ``per_name`` (if not None),
    and ``per_prompt`` once per request (the reply's priming)."""

    per_message: int = MESSAGE_OVERHEAD
    role: bool = False
    per_name: int | None = None
    per_prompt: int = 0


ESTIMATE_FRAMING = Framing()
# How OpenAI's chat models frame a message (the cookbook's num_tokens_from_messages).
OPENAI_FRAMING = Framing(per_message=3, role=True, per_name=1, per_prompt=3)


class EstimateCounter:
    """An estimate that is sane for English and for CJK text (see the module doc)."""

    exact = False

    def count(self, text: str) -> int:
        if not text:
            return 0
        if text.isascii():
            return math.ceil(len(text) / 4)
        ascii_chars = len(text.encode("ascii", "ignore"))
        cjk = len(_CJK.findall(text))
        other = len(text) - ascii_chars - cjk
        return math.ceil(ascii_chars / 4) + cjk + math.ceil(other / 2)

    def __repr__(self) -> str:
        return "EstimateCounter()"


class ExactCounter:
    """Counts with OpenAI's real ``encoding`` (``o200k_base`` or ``cl100k_base``),
    offline: needs the ``tokens`` extra (the ``bpe-openai`` package)."""

    exact = True
    framing = OPENAI_FRAMING

    def __init__(self, encoding: str) -> None:
        try:
            loaded = _load(encoding)
        except ImportError as exc:
            raise ImportError(
                f"ExactCounter({encoding!r}) needs the tokens extra: "
                "pip install 'cairn-durable[tokens]'"
            ) from exc
        self.encoding = encoding
        # encode_ordinary: a "<|endoftext|>" in a message is text, as the API takes it.
        self._encode = loaded.encode_ordinary

    def count(self, text: str) -> int:
        if len(text) <= _PIECE:
            return len(self._encode(text)) if text else 0
        # bpe-openai refuses a text of a million characters or more, and one
        # of more than 200,000 tokens: a long one is encoded in pieces cut
        # before a whitespace, where the encodings' pre-tokenizer mostly splits
        # anyway (measured: exact on prose, code and Japanese; JSON 2 tokens
        # over in 95,000, from a newline run cut in two).
        return sum(len(self._encode(piece)) for piece in _pieces(text))

    def __repr__(self) -> str:
        return f"ExactCounter({self.encoding!r})"


# At most 4 bytes a character, so at most 200,000 tokens a piece.
_PIECE = 50_000
_SPACE = re.compile(r"\s")


def _pieces(text: str) -> list[str]:
    """``text`` in pieces of at most ``_PIECE`` characters, each (but the first)
    starting at a whitespace when there is one to cut before."""
    pieces, start = [], 0
    while len(text) - start > _PIECE:
        end = start + _PIECE
        cut = max((m.start() for m in _SPACE.finditer(text, start + 1, end)), default=end)
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return pieces


def _load(encoding: str) -> Any:
    """The encoding, read from the package's wheel once per process. (bpe-openai
    0.1.4 reads its files, on import and after, with a deprecated
    importlib.resources call: that warning is the package's, not the app's, so
    it is not passed on.)"""
    with _loading:
        if encoding not in _loaded:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                module: Any = importlib.import_module(_EXTRA)
                _loaded[encoding] = module.get_encoding(encoding)
        return _loaded[encoding]


_loading = threading.Lock()
_loaded: dict[str, Any] = {}
DEFAULT_COUNTER = EstimateCounter()


def has_exact_counts() -> bool:
    """True if the ``tokens`` extra is installed."""
    return importlib.util.find_spec(_EXTRA) is not None


def encoding_for_model(model: str) -> str | None:
    """The OpenAI encoding of ``model`` (``o200k_base``, ``cl100k_base``), or None
    for a model this table does not know (another provider's, say)."""
    name = model.strip().lower()
    if name.startswith("ft:"):
        name = name[3:]
    name = name.rsplit("/", 1)[-1]
    for prefix, encoding in OPENAI_ENCODINGS:
        if name == prefix or name.startswith((f"{prefix}-", f"{prefix}.", f"{prefix}:")):
            return encoding
    return None


@functools.cache
def _exact(encoding: str) -> ExactCounter:
    return ExactCounter(encoding)


def counter_for(model: str | None) -> TokenCounter:
    """The counter for ``model``'s prompts: exact for an OpenAI model when the
    ``tokens`` extra is installed, else the estimate."""
    encoding = None if model is None else encoding_for_model(model)
    if encoding is None or not has_exact_counts():
        return DEFAULT_COUNTER
    return _exact(encoding)


def is_exact(counter: TokenCounter) -> bool:
    """True if ``counter`` counts a provider's real tokens (it says so)."""
    return bool(getattr(counter, "exact", False))


def describe_counter(counter: TokenCounter) -> str:
    """What a conversation's counts come from, for people: ``o200k_base (exact)``,
    ``estimate``, or a custom counter's class name."""
    if isinstance(counter, ExactCounter):
        return f"{counter.encoding} (exact)"
    if isinstance(counter, EstimateCounter):
        return "estimate"
    return type(counter).__name__


def framing_of(counter: TokenCounter) -> Framing:
    framing = getattr(counter, "framing", ESTIMATE_FRAMING)
    return framing if isinstance(framing, Framing) else ESTIMATE_FRAMING


def count_message(message: Mapping[str, Any], counter: TokenCounter = DEFAULT_COUNTER) -> int:
    """Tokens a message takes in a prompt: its text, its tool calls, its framing."""
    framing = framing_of(counter)
    total = framing.per_message
    if framing.role:
        total += counter.count(str(message.get("role") or ""))
    if framing.per_name is not None and isinstance(message.get("name"), str):
        total += framing.per_name + counter.count(message["name"])
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
    """Tokens of a prompt of ``messages``: each message, and the reply's priming."""
    if not messages:
        return 0
    return sum(count_message(m, counter) for m in messages) + framing_of(counter).per_prompt
