"""Summarizers: fold the head of a conversation into its running summary.

A summarizer is any callable taking a ``SummaryRequest`` (the previous summary,
if any, and the messages being folded in) and returning the new summary, as a
``Summary`` or a plain string, or an awaitable of either for async code. The
previous summary is always part of the request, so what was summarized before
is carried on rather than lost.

Two come with cairn:

* ``LLMSummarizer``: asks a model for a length-bounded summary with the goal,
  the decisions taken and why, open items, artifacts produced and the next step.
* ``ExtractiveSummarizer``: needs no model. It keeps the same sections, filled
  from the messages by simple rules (the first request is the goal; tool calls
  and sentences that decide are decisions; paths and URLs are artifacts; the
  last thing the assistant said is the next step), and trims the oldest entries
  to stay within its token budget. A fallback, and what tests and offline runs use.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from cairn.agent.messages import SYSTEM_ROLES, Message, system, text_of, user
from cairn.agent.pricing import Usage
from cairn.agent.providers import Completion, default_client, provider_for
from cairn.agent.tokens import DEFAULT_COUNTER, TokenCounter, count_messages

SUMMARY_HEADER = (
    "[Summary of the earlier part of this conversation, which was compacted. "
    "It stands in for those messages.]"
)

SUMMARY_PROMPT = """\
You keep the running summary of a long-running agent's conversation. You are given
the previous summary (if there is one) and the messages that came after it. Write
one updated summary that replaces both. Everything in the previous summary that
still matters must stay in it: nothing summarized before may be lost.

Use exactly these sections:
Goal: what the agent is trying to achieve, and for whom.
Decisions: each decision taken and why, one per line starting with "- ".
Open items: questions, failures and work not done yet, one per line starting with "- ".
Artifacts: files, ids, URLs and results produced, one per line starting with "- ".
Next step: what the agent was about to do next.

Be factual and terse. Keep exact names, ids, numbers and paths. Write at most
{max_words} words."""


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    """What a summarizer is asked: fold ``messages`` into ``previous``, within
    about ``max_tokens`` tokens (as ``counter`` counts them)."""

    previous: str | None
    messages: Sequence[Message]
    max_tokens: int = 800
    counter: TokenCounter = field(default=DEFAULT_COUNTER)


@dataclass(frozen=True, slots=True)
class Summary:
    """A summarizer's answer, with the usage of the model call if it made one."""

    text: str
    usage: Usage | None = None
    model: str | None = None
    # The model's finish reason: "length" / "max_tokens" means it was cut off.
    finish_reason: str | None = None


SummaryResult = Summary | str


class SummaryFailed(Exception):
    """A summarizer's call failed after earlier calls of the same summary were
    answered (and paid for): ``error`` is the failure, ``paid`` the summary so far
    with those calls' usage, which the failed compaction records for ``cairn cost``."""

    def __init__(self, error: Exception, paid: Summary) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error
        self.paid = paid


class Summarizer(Protocol):
    """``summarizer(request)`` → the new running summary (or an awaitable of it)."""

    def __call__(self, request: SummaryRequest) -> SummaryResult | Awaitable[SummaryResult]: ...


@runtime_checkable
class ChunkedSummarizer(Summarizer, Protocol):
    """A summarizer that folds a head too big for one request in chunks, one
    request each: ``chunks(request)`` splits ``request.messages`` into the
    consecutive groups it sends (one group, when they fit one request), and
    ``fold_chunk(request)`` makes one request, folding ``request.messages`` (one
    group) into ``request.previous``. Compaction records each chunk's summary as
    a history entry of its own before it sends the next (``cairn.agent.chunked``),
    so a crash between two chunks does not send the answered ones again.
    ``LLMSummarizer`` is one."""

    def chunks(self, request: SummaryRequest) -> list[list[Message]]: ...

    def fold_chunk(self, request: SummaryRequest) -> Summary | Awaitable[Summary]: ...


def is_async_summarizer(summarizer: Any) -> bool:
    """True when calling ``summarizer`` gives an awaitable."""
    flag = getattr(summarizer, "is_async", None)
    if isinstance(flag, bool):
        return flag
    call = getattr(type(summarizer), "__call__", None)  # noqa: B004 - async callables count
    return inspect.iscoroutinefunction(summarizer) or inspect.iscoroutinefunction(call)


def as_summary(result: SummaryResult) -> Summary:
    return Summary(result) if isinstance(result, str) else result


# -- the summary as a message --------------------------------------------------------------
def summary_message(text: str) -> Message:
    """How a summary sits in the active context: a user turn, marked as a summary
    (a user turn, not a second system prompt, so every provider accepts it)."""
    return {"role": "user", "content": f"{SUMMARY_HEADER}\n{text}"}


def summary_text(message: Mapping[str, Any]) -> str:
    """The summary a summary message carries, without its header."""
    content = str(message.get("content") or "")
    return content.removeprefix(SUMMARY_HEADER).lstrip("\n")


def transcript(messages: Sequence[Message]) -> str:
    """Messages as plain text, one block per message, for a model to read."""
    lines: list[str] = []
    for message in messages:
        role = message["role"]
        if role == "tool":
            lines.append(f"[tool result {message.get('tool_call_id', '')}] {text_of(message)}")
            continue
        content = message.get("content")
        if isinstance(content, str) and content:
            lines.append(f"[{role}] {content}")
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            lines.append(
                f"[{role} calls {function.get('name')} as {call.get('id')}] "
                f"{function.get('arguments', '')}"
            )
    return "\n".join(lines)


# -- the model summarizer -------------------------------------------------------------------
# Finish reasons that mean the reply was cut off at its token cap (OpenAI, Anthropic).
TRUNCATED = frozenset({"length", "max_tokens"})
DEFAULT_WINDOW = 128_000
# Tokens left free in each summarizer request for framing the estimate does not see.
_WINDOW_SLACK = 256


class LLMSummarizer:
    """Asks a model for the running summary (see ``SUMMARY_PROMPT``).

    ``client`` is an openai or anthropic SDK client (default: one built from the
    environment). The answer is bounded twice: the prompt asks for at most
    ``max_words`` words, and ``max_tokens`` (or the conversation's smaller
    ``summary_tokens``) is sent as the reply's cap. ``window`` is the model's
    context in tokens: a head too big for one request is folded in chunks that
    fit, each chunk's summary becoming the next one's previous summary.
    """

    name = "llm"

    def __init__(
        self,
        client: Any = None,
        *,
        model: str,
        max_words: int = 400,
        max_tokens: int = 800,
        window: int = DEFAULT_WINDOW,
        prompt: str = SUMMARY_PROMPT,
        params: Mapping[str, Any] | None = None,
    ) -> None:
        self._provider = provider_for(client if client is not None else default_client())
        self.model = model
        self.max_words = max_words
        self.max_tokens = max_tokens
        self.window = window
        self.prompt = prompt
        self.params = dict(params or {})
        if self._chunk_budget(DEFAULT_COUNTER) < _WINDOW_SLACK:
            raise ValueError(
                f"LLMSummarizer(window={window}, max_tokens={max_tokens}): the window must "
                "hold the prompt, the previous summary, the reply and some messages; give a "
                "larger window or a smaller max_tokens"
            )

    @property
    def is_async(self) -> bool:
        return self._provider.is_async

    def request_messages(self, request: SummaryRequest) -> list[Message]:
        previous = request.previous or "(none yet)"
        body = f"Previous summary:\n{previous}\n\nNew messages:\n{transcript(request.messages)}"
        return [system(self.prompt.format(max_words=self.max_words)), user(body)]

    def request_params(self, request: SummaryRequest) -> dict[str, Any]:
        """The call's parameters: the reply's cap unless ``params`` set one."""
        params = dict(self.params)
        if "max_tokens" not in params and "max_completion_tokens" not in params:
            params["max_tokens"] = min(self.max_tokens, request.max_tokens)
        return params

    def _chunk_budget(self, counter: TokenCounter) -> int:
        """Tokens of messages one request may carry: the window less the prompt,
        a previous summary and the reply (each at most ``max_tokens``)."""
        empty = SummaryRequest(None, [], self.max_tokens, counter)
        framing = count_messages(self.request_messages(empty), counter)
        return self.window - framing - 2 * self.max_tokens - _WINDOW_SLACK

    def chunks(self, request: SummaryRequest) -> list[list[Message]]:
        """``request.messages`` in consecutive groups that each fit one request
        (a single message too big for one is clipped to fit)."""
        budget = self._chunk_budget(request.counter)
        groups: list[list[Message]] = [[]]
        used = 0
        for message in request.messages:
            size = request.counter.count(transcript([message])) + 1
            if size > budget:
                message, size = _clipped(message, budget, request.counter), budget
            if used + size > budget and groups[-1]:
                groups.append([])
                used = 0
            groups[-1].append(message)
            used += size
        return groups

    def __call__(self, request: SummaryRequest) -> Summary | Awaitable[Summary]:
        if self.is_async:
            return self._acall(request)
        summary: Summary | None = None
        for part in self.chunks(request):
            try:
                latest = self.fold_chunk(chunk_request(request, summary, part))
            except Exception as exc:
                raise _after(exc, summary) from exc
            assert isinstance(latest, Summary)
            summary = _folded(summary, latest)
            if summary.finish_reason in TRUNCATED:
                break
        assert summary is not None
        return summary

    async def _acall(self, request: SummaryRequest) -> Summary:
        summary: Summary | None = None
        for part in self.chunks(request):
            try:
                latest = await self.fold_chunk(chunk_request(request, summary, part))  # type: ignore[misc]
            except Exception as exc:
                raise _after(exc, summary) from exc
            summary = _folded(summary, latest)
            if summary.finish_reason in TRUNCATED:
                break
        assert summary is not None
        return summary

    def fold_chunk(self, request: SummaryRequest) -> Summary | Awaitable[Summary]:
        """One request: fold ``request.messages`` (one chunk) into ``request.previous``."""
        messages = self.request_messages(request)
        params = self.request_params(request)
        pending = self._provider.complete(messages, model=self.model, tools=None, params=params)
        if self.is_async:
            return self._asummary(pending)  # type: ignore[arg-type]
        assert isinstance(pending, Completion)
        return self._summary(pending)

    async def _asummary(self, pending: Awaitable[Completion]) -> Summary:
        return self._summary(await pending)

    def _summary(self, completion: Completion) -> Summary:
        text = text_of(completion.message).strip()
        return Summary(text, completion.usage, completion.model, completion.finish_reason)


def chunk_request(
    request: SummaryRequest, so_far: Summary | None, part: Sequence[Message]
) -> SummaryRequest:
    """The request of one chunk, ``part``: folded into the summary so far, or into
    ``request``'s previous summary for the first chunk."""
    previous = request.previous if so_far is None else so_far.text
    return SummaryRequest(previous, part, request.max_tokens, request.counter)


def _after(error: Exception, so_far: Summary | None) -> Exception:
    """What a chunk's failed call raises: ``error`` itself for the first chunk,
    else ``SummaryFailed`` carrying the usage of the chunks answered before it."""
    if so_far is None or so_far.usage is None:
        return error
    return SummaryFailed(error, so_far)


def _folded(before: Summary | None, latest: Summary) -> Summary:
    """The latest chunk's summary, carrying the usage of every call so far."""
    if before is None or before.usage is None or latest.usage is None:
        return latest
    return Summary(latest.text, before.usage + latest.usage, latest.model, latest.finish_reason)


def _clipped(message: Message, budget: int, counter: TokenCounter) -> Message:
    """``message`` as text cut to about ``budget`` tokens (for a summarizer's eyes
    only: the stored row keeps all of it)."""
    text = text_of(message) or transcript([message])
    while text and counter.count(text) > budget - 16:
        text = text[: len(text) * 3 // 4]
    clipped = {key: value for key, value in message.items() if key != "tool_calls"}
    clipped["content"] = f"{text} [... cut to fit the summarizer's window]"
    return clipped


# -- the offline summarizer ------------------------------------------------------------------
SECTIONS = ("Goal", "Decisions", "Open items", "Artifacts", "Next step")
_LISTS = ("Decisions", "Open items", "Artifacts")
_DECIDES = re.compile(
    r"\b(decid|chose|choos|will\b|because|so that|plan|conclud|found|therefore)", re.I
)
_OPEN = re.compile(r"(\btodo\b|\bopen\b|pending|unresolved|need to|not yet|remaining|\?$)", re.I)
_ARTIFACT = re.compile(r"(https?://\S+|(?:[\w.-]+/)*[\w.-]+\.[A-Za-z][\w]{0,5}\b|#\d+)")
_SENTENCE = re.compile("(?<=[.!?\u3002\uff01\uff1f])\\s*")
_ITEM_WIDTH = 160


def _clip(text: str, width: int = _ITEM_WIDTH) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def parse_sections(text: str | None) -> dict[str, list[str]]:
    """A summary in the sections format, back into its parts."""
    parts: dict[str, list[str]] = {name: [] for name in SECTIONS}
    current: str | None = None
    for raw in (text or "").splitlines():
        line = raw.strip()
        head, _, rest = line.partition(":")
        if head in parts and not line.startswith("-"):
            current = head
            if rest.strip():
                parts[head].append(rest.strip())
        elif current is not None and line:
            parts[current].append(line.removeprefix("- ").strip())
    return parts


def render_sections(parts: Mapping[str, Sequence[str]]) -> str:
    lines: list[str] = []
    for name in SECTIONS:
        items = list(parts.get(name, ()))
        if name in _LISTS:
            lines.append(f"{name}:")
            lines += [f"- {item}" for item in items] or ["- (none)"]
        else:
            lines.append(f"{name}: {' '.join(items) or '(unknown)'}")
    return "\n".join(lines)


def _add(items: list[str], item: str) -> None:
    if item and item != "(none)" and item not in items:
        items.append(item)


class ExtractiveSummarizer:
    """A running summary without a model (see the module doc)."""

    name = "extractive"
    is_async = False

    def __init__(self, *, max_tokens: int = 600) -> None:
        self.max_tokens = max_tokens

    def __call__(self, request: SummaryRequest) -> Summary:
        parts = parse_sections(request.previous)
        for message in request.messages:
            self._fold(parts, message)
        budget = min(self.max_tokens, request.max_tokens)
        return Summary(self._within(parts, budget, request.counter))

    def _fold(self, parts: dict[str, list[str]], message: Message) -> None:
        role, text = message["role"], text_of(message)
        if role in SYSTEM_ROLES:
            return
        if role == "user" and not [g for g in parts["Goal"] if g != "(unknown)"]:
            parts["Goal"] = [_clip(text, 300)]
        elif role == "user":
            _add(parts["Open items"], _clip(f"user asked: {text}"))
        for artifact in _ARTIFACT.findall(text):
            _add(parts["Artifacts"], artifact.rstrip(".,;:)"))
        if role != "assistant":
            return
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            _add(
                parts["Decisions"],
                _clip(f"called {function.get('name')}({function.get('arguments', '')})", 100),
            )
        sentences = [s for s in _SENTENCE.split(str(message.get("content") or "")) if s.strip()]
        for sentence in sentences:
            if _DECIDES.search(sentence):
                _add(parts["Decisions"], _clip(sentence))
            elif _OPEN.search(sentence):
                _add(parts["Open items"], _clip(sentence))
        if sentences:
            parts["Next step"] = [_clip(sentences[-1])]

    def _within(self, parts: dict[str, list[str]], budget: int, counter: TokenCounter) -> str:
        text = render_sections(parts)
        # Drop the oldest entry of the longest list until it fits: the newest
        # decisions and artifacts matter most to what the agent does next.
        while counter.count(text) > budget:
            longest = max(_LISTS, key=lambda name: len(parts[name]))
            if not parts[longest]:
                # Nothing left to drop: cut the text itself (a summary over the
                # budget would be rejected, cairn.agent.compaction).
                while text and counter.count(text) > budget:
                    text = text[: len(text) * 3 // 4]
                return text
            parts[longest].pop(0)
            text = render_sections(parts)
        return text
