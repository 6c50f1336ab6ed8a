"""Fidelity: does the compressed history lead to the same decisions as the full one?

``fidelity(history, summarizer, decide, probes)`` replays a conversation's
compaction (the same rules as a live conversation: compact before a model turn
when the context is over ``threshold``, keep ``keep_tail``, reject a summary
cut off or over ``summary_tokens``, hold off after a miss), and at the chosen
points asks ``decide`` twice, once with the full history up to that point and
once with the compressed one. ``decide`` is usually a model asked "what is the
next tool call?" (``next_tool_call``). The report gives the agreement rate and
lists every disagreement.

Given the stored rows of a recorded conversation (``iter_history``) and no
summarizer, it uses the summaries that were really made, so it measures what
the agent actually saw; ``cairn fidelity TASK`` does that.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cairn.agent._window import Row, Window, split_point
from cairn.agent.archive import StoredMessage
from cairn.agent.compaction import hold_after, margin, rejection
from cairn.agent.messages import Message, normalize
from cairn.agent.providers import Completion, default_client, provider_for
from cairn.agent.summarize import (
    ExtractiveSummarizer,
    Summarizer,
    SummaryRequest,
    as_summary,
    summary_message,
    summary_text,
)
from cairn.agent.tokens import DEFAULT_COUNTER, TokenCounter, count_message

Decide = Callable[[list[Message]], Any]


@dataclass(frozen=True, slots=True)
class Disagreement:
    """A point where the two histories led to different decisions."""

    position: int
    full: Any
    compressed: Any
    full_tokens: int
    compressed_tokens: int


@dataclass(frozen=True, slots=True)
class FidelityReport:
    """Agreement between decisions made on the full and the compressed history."""

    probes: int
    agreements: int
    disagreements: list[Disagreement]
    positions: list[int]

    @property
    def rate(self) -> float:
        """Agreements over probes (1.0 when there was nothing to probe)."""
        return self.agreements / self.probes if self.probes else 1.0

    def to_json(self) -> dict[str, Any]:
        return {
            "probes": self.probes,
            "agreements": self.agreements,
            "rate": self.rate,
            "positions": self.positions,
            "disagreements": [
                {
                    "position": d.position,
                    "full": repr(d.full),
                    "compressed": repr(d.compressed),
                    "full_tokens": d.full_tokens,
                    "compressed_tokens": d.compressed_tokens,
                }
                for d in self.disagreements
            ],
        }


# -- the compressed contexts ------------------------------------------------------------
def _turn_points(messages: Sequence[Message]) -> list[int]:
    """Positions where the model decided: each assistant message."""
    return [i for i, m in enumerate(messages) if m["role"] == "assistant"]


def _choose(candidates: list[int], probes: int | Sequence[int]) -> list[int]:
    if not isinstance(probes, int):
        return sorted(set(probes))
    if probes <= 0 or not candidates:
        return []
    if len(candidates) <= probes:
        return candidates
    step = len(candidates) / probes
    return sorted({candidates[int(i * step + step / 2)] for i in range(probes)})


def simulated_contexts(
    messages: Sequence[Message],
    points: Sequence[int],
    summarizer: Summarizer,
    *,
    threshold: int,
    keep_tail: int,
    counter: TokenCounter,
    summary_tokens: int,
) -> dict[int, list[Message]]:
    """The compressed context at each of ``points``, compacting as a live
    conversation would (before each model turn, when over ``threshold``)."""
    wanted, found = set(points), {}
    window, last = Window(), max(points, default=-1)
    misses, hold = 0, 0  # the hold after a miss, as cairn.agent.compaction keeps it
    for idx, message in enumerate(messages[: last + 1]):
        due = window.tokens() > threshold and window.tokens() >= hold
        if message["role"] == "assistant" and due:
            _compact(window, summarizer, keep_tail, counter, summary_tokens, idx)
            if window.tokens() > threshold - margin(threshold):
                misses += 1
                hold = hold_after(misses, window.tokens(), keep_tail)
            else:
                misses, hold = 0, 0
        if idx in wanted:
            found[idx] = window.messages()
        # Rows at even positions leave room for a summary row just before each.
        window.add(Row(2 * idx, message, count_message(message, counter)))
    return found


def _compact(
    window: Window,
    summarizer: Summarizer,
    keep_tail: int,
    counter: TokenCounter,
    summary_tokens: int,
    idx: int,
) -> None:
    cut = split_point(window.tail, keep_tail)
    if cut == 0:
        return
    head = window.tail[:cut]
    previous = None if window.summary is None else summary_text(window.summary.message)
    request = SummaryRequest(previous, [r.message for r in head], summary_tokens, counter)
    summary = as_summary(summarizer(request))  # type: ignore[arg-type]
    text = summary.text.strip()
    if rejection(summary, text, counter, summary_tokens) is None:
        message = summary_message(text)
        tokens = count_message(message, counter)
        window.add(Row(2 * idx - 1, message, tokens, "summary", head[-1].idx))


def recorded_contexts(
    rows: Sequence[StoredMessage], points: Sequence[int]
) -> tuple[list[Message], dict[int, list[Message]]]:
    """From a recorded conversation's rows: its messages, and the context the agent
    really had at each of ``points`` (positions among the messages)."""
    wanted, found = set(points), {}
    messages: list[Message] = []
    window = Window()
    for stored in rows:
        # With its meta, so that a reply row clears what its call had cleared.
        row = Row(
            stored.idx, stored.message, stored.tokens, stored.kind, stored.covers_until, stored.meta
        )
        if stored.kind == "message":
            if len(messages) in wanted:
                found[len(messages)] = window.messages()
            messages.append(stored.message)
        window.add(row)
    return messages, found


# -- the measure -----------------------------------------------------------------------
def fidelity(
    history: Sequence[Mapping[str, Any] | StoredMessage],
    summarizer: Summarizer | None,
    decide: Decide,
    probes: int | Sequence[int] = 10,
    *,
    threshold: int = 8000,
    keep_tail: int = 2000,
    counter: TokenCounter | None = None,
    summary_tokens: int = 800,
    same: Callable[[Any, Any], bool] | None = None,
) -> FidelityReport:
    """Ask ``decide`` with the full and the compressed history at ``probes`` points
    (a count, spread over the model turns that had a compressed context, or
    explicit positions) and report how often the answers agree (``same``,
    default ``==``)."""
    count = counter or DEFAULT_COUNTER
    recorded = [h for h in history if isinstance(h, StoredMessage)]
    if recorded and summarizer is None:
        messages, _ = recorded_contexts(recorded, [])
        points = _choose(_compressed_turns_recorded(recorded), probes)
        _, contexts = recorded_contexts(recorded, points)
    else:
        messages = [
            h.message if isinstance(h, StoredMessage) else normalize(h)
            for h in history
            if not (isinstance(h, StoredMessage) and h.kind == "summary")
        ]
        points = _choose(_over_threshold_turns(messages, threshold, count), probes)
        contexts = simulated_contexts(
            messages,
            points,
            summarizer or ExtractiveSummarizer(max_tokens=summary_tokens),
            threshold=threshold,
            keep_tail=keep_tail,
            counter=count,
            summary_tokens=summary_tokens,
        )
    return _measure(messages, contexts, decide, same or _equal, count)


def _equal(a: Any, b: Any) -> bool:
    return bool(a == b)


def _over_threshold_turns(
    messages: Sequence[Message], threshold: int, counter: TokenCounter
) -> list[int]:
    total, points = 0, []
    for idx, message in enumerate(messages):
        if message["role"] == "assistant" and total > threshold:
            points.append(idx)
        total += count_message(message, counter)
    return points


def _compressed_turns_recorded(rows: Sequence[StoredMessage]) -> list[int]:
    points, seen_summary, position = [], False, 0
    for stored in rows:
        if stored.kind == "summary":
            seen_summary = True
            continue
        if seen_summary and stored.message["role"] == "assistant":
            points.append(position)
        position += 1
    return points


def _measure(
    messages: Sequence[Message],
    contexts: Mapping[int, list[Message]],
    decide: Decide,
    same: Callable[[Any, Any], bool],
    counter: TokenCounter,
) -> FidelityReport:
    agreements, disagreements = 0, []
    for position in sorted(contexts):
        full = list(messages[:position])
        compressed = contexts[position]
        full_decision, compressed_decision = decide(full), decide(compressed)
        if same(full_decision, compressed_decision):
            agreements += 1
            continue
        disagreements.append(
            Disagreement(
                position,
                full_decision,
                compressed_decision,
                sum(count_message(m, counter) for m in full),
                sum(count_message(m, counter) for m in compressed),
            )
        )
    return FidelityReport(len(contexts), agreements, disagreements, sorted(contexts))


# -- a model as the decision function -----------------------------------------------------
@dataclass(frozen=True, slots=True)
class Decision:
    """What the model would do next: call ``tool`` with ``arguments``, or answer
    in text (``tool`` None)."""

    tool: str | None
    arguments: str = ""


def same_tool(a: Decision, b: Decision) -> bool:
    """Decisions agree when they call the same tool (arguments may differ)."""
    return a.tool == b.tool


def _tools_seen(messages: Sequence[Message]) -> list[dict[str, Any]]:
    names: dict[str, None] = {}
    for message in messages:
        for call in message.get("tool_calls") or ():
            names[str(call["function"]["name"])] = None
    return [
        {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
        for n in names
    ]


def next_tool_call(
    client: Any = None,
    *,
    model: str,
    tools: Sequence[Mapping[str, Any]] | None = None,
    params: Mapping[str, Any] | None = None,
) -> Decide:
    """A ``decide`` function that asks a model for its next move. Without ``tools``
    it offers every tool the history called (with open parameters)."""
    provider = provider_for(client if client is not None else default_client())
    if provider.is_async:
        raise ValueError("fidelity runs outside any event loop: give it a sync client")

    def decide(messages: list[Message]) -> Decision:
        offered = list(tools) if tools is not None else _tools_seen(messages)
        result = provider.complete(
            messages, model=model, tools=offered or None, params=dict(params or {})
        )
        assert isinstance(result, Completion)
        calls = result.message.get("tool_calls") or []
        if not calls:
            return Decision(None, str(result.message.get("content") or "")[:200])
        function = calls[0]["function"]
        return Decision(str(function["name"]), str(function.get("arguments") or ""))

    return decide
