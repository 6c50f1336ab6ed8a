"""Fidelity: does the compressed history lead to the same decisions as the full one?

``fidelity(history, summarizer, decide)`` asks ``decide`` (usually a model asked
"what is the next tool call?": ``next_tool_call``) at each decision point after
a compaction, once with the full history up to that point and once with the
compressed context, and counts how often the two answers agree. Two answers
can differ without any loss: a model is not perfectly repeatable. So at each
point it also asks a second time with the full history (the baseline): how
often the full history agrees with itself is the noise floor, and the score is
reported against it, both with 95% Wilson intervals (``FidelityReport``):

* ``below the noise floor``: the score's whole interval is under the
  baseline's: the compression changed decisions, clearly more often than the
  model changes its own mind;
* ``within the noise floor``: the two intervals overlap: no loss the probes can
  tell from noise (with few probes the intervals are wide: read them too);
* ``failure: a critical loss at probe N``, before either: the noise floor shows
  no noise at all (the full history agreed with itself at every probe) and at
  probe N the compacted context led to another decision, and led to it again
  when asked a second time. One such probe is a loss, however high the score:
  a model that never changes its mind did, on the compacted context alone
  (``critical_loss``). The second ask is made only at disagreements, in order,
  until one repeats, so a confirmed probe costs one call more.

Every decision point is probed, up to ``max_probes`` (beyond it, a seeded
stratified sample: ``cairn.agent.fidelity_points.stratified``). No point to
probe is an error (``NothingToProbe``), never a 100% score.

Given the stored rows of a recorded conversation (``iter_history``) and no
summarizer, it uses the summaries that were really made and offers each probe
the tools the recorded call had, so it measures what the agent actually saw;
``cairn fidelity TASK`` does that. With ``before`` (the archive of the
conversation it was handed off from), the full history is that archive
followed by this conversation's own messages.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cairn.agent.archive import StoredMessage
from cairn.agent.fidelity_points import (
    Point,
    recorded_points,
    simulated_contexts,
    simulated_points,
)
from cairn.agent.messages import Message, normalize
from cairn.agent.providers import Completion, default_client, provider_for
from cairn.agent.summarize import ExtractiveSummarizer, Summarizer
from cairn.agent.tokens import DEFAULT_COUNTER, TokenCounter, count_message

__all__ = [
    "Decision",
    "Disagreement",
    "FidelityReport",
    "NothingToProbe",
    "Rate",
    "fidelity",
    "next_tool_call",
    "same_tool",
    "simulated_contexts",
]

Decide = Callable[..., Any]
DEFAULT_MAX_PROBES = 200
Z95 = 1.959963984540054


class NothingToProbe(ValueError):
    """The history has no decision point after a compaction: nothing to measure."""


def nothing_to_probe(candidates: int) -> NothingToProbe:
    """The error for a history with no point chosen among ``candidates``."""
    if candidates:
        return NothingToProbe(
            f"nothing to probe: none of the {candidates} model turns after a compaction "
            "was chosen (the positions asked for are not among them)"
        )
    return NothingToProbe(
        "nothing to probe: no model turn came after a compaction, so the compressed and "
        "the full history never differed at a decision (fidelity measures what "
        "compaction changed; a conversation that was never compacted has nothing to measure)"
    )


@dataclass(frozen=True, slots=True)
class Rate:
    """Agreements out of probes, with a 95% Wilson score interval."""

    agreements: int
    probes: int

    @property
    def rate(self) -> float:
        return self.agreements / self.probes

    @property
    def interval(self) -> tuple[float, float]:
        n, p = self.probes, self.rate
        centre = (p + Z95**2 / (2 * n)) / (1 + Z95**2 / n)
        half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n)) / (1 + Z95**2 / n)
        return max(0.0, centre - half), min(1.0, centre + half)

    def to_json(self) -> dict[str, Any]:
        low, high = self.interval
        return {
            "agreements": self.agreements,
            "probes": self.probes,
            "rate": self.rate,
            "ci95": [round(low, 4), round(high, 4)],
        }


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
    """Agreement between decisions made on the full and the compressed history,
    and (``baseline``) of the full history with itself."""

    probes: int
    agreements: int
    disagreements: list[Disagreement]
    positions: list[int]
    baseline: Rate | None = None
    candidates: int = 0
    tools: str = "recorded"
    handoff: dict[str, Any] | None = field(default=None)
    # The probe whose disagreement is a critical loss (see the module doc), or None.
    critical: int | None = None

    @property
    def rate(self) -> float:
        """Agreements over probes."""
        return self.agreements / self.probes

    @property
    def score(self) -> Rate:
        return Rate(self.agreements, self.probes)

    @property
    def verdict(self) -> str:
        """Where the score stands against the noise floor (see the module doc)."""
        if self.critical is not None:
            return f"failure: a critical loss at probe {self.critical}"
        if self.baseline is None:
            return "no baseline"
        floor, _ = self.baseline.interval
        _, high = self.score.interval
        return "below the noise floor" if high < floor else "within the noise floor"

    def to_json(self) -> dict[str, Any]:
        return {
            "probes": self.probes,
            "agreements": self.agreements,
            "rate": self.rate,
            "ci95": self.score.to_json()["ci95"],
            "baseline": None if self.baseline is None else self.baseline.to_json(),
            "verdict": self.verdict,
            "critical": self.critical,
            "candidates": self.candidates,
            "tools": self.tools,
            "handoff": self.handoff,
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


# -- the measure -----------------------------------------------------------------------
def fidelity(
    history: Sequence[Mapping[str, Any] | StoredMessage],
    summarizer: Summarizer | None,
    decide: Decide,
    probes: int | Sequence[int] | None = None,
    *,
    max_probes: int = DEFAULT_MAX_PROBES,
    seed: int = 0,
    baseline: bool = True,
    before: Sequence[Mapping[str, Any]] | None = None,
    handoff: Mapping[str, Any] | None = None,
    threshold: int = 8000,
    keep_tail: int = 2000,
    counter: TokenCounter | None = None,
    summary_tokens: int = 800,
    same: Callable[[Any, Any], bool] | None = None,
    max_context: int | None = None,
) -> FidelityReport:
    """Ask ``decide`` with the full and the compressed history at the decision
    points after a compaction (all of them up to ``max_probes``, a stratified
    sample of ``probes`` of them, or the explicit positions ``probes``), and with
    the full history a second time unless ``baseline`` is False; report how often
    the answers agree (``same``, default ``==``). ``decide`` takes the messages,
    and ``tools=`` (what the recorded call offered) and ``label=`` if it names them.
    """
    count = counter or DEFAULT_COUNTER
    recorded = [h for h in history if isinstance(h, StoredMessage)]
    from_record = bool(recorded) and summarizer is None
    if from_record:
        prior = None if before is None else [normalize(m) for m in before]
        points, candidates, messages = recorded_points(
            recorded, cap=max_probes, seed=seed, probes=probes, before=prior
        )
    else:
        messages = _plain(history)
        points, candidates = simulated_points(
            messages,
            summarizer or ExtractiveSummarizer(max_tokens=summary_tokens),
            probes=probes,
            cap=max_probes,
            seed=seed,
            threshold=threshold,
            keep_tail=keep_tail,
            counter=count,
            summary_tokens=summary_tokens,
            max_context=max_context,
        )
    if not points:
        raise nothing_to_probe(candidates)
    found = from_record and all(p.tools is not None for p in points)
    return _measure(
        points if found else _tools_filled(points, messages),
        decide,
        same or _equal,
        count,
        baseline=baseline,
        candidates=candidates,
        tools="recorded" if found else "inferred",
        handoff=None if handoff is None else dict(handoff),
    )


def _plain(history: Sequence[Mapping[str, Any] | StoredMessage]) -> list[Message]:
    """The messages of ``history``, summaries left out."""
    return [
        h.message if isinstance(h, StoredMessage) else normalize(h)
        for h in history
        if not (isinstance(h, StoredMessage) and h.kind == "summary")
    ]


def _equal(a: Any, b: Any) -> bool:
    return bool(a == b)


def _tools_filled(points: Sequence[Point], messages: Sequence[Message]) -> list[Point]:
    """The points, those whose call's tools were not recorded (an older record,
    or plain messages) given every tool the history called, to both sides alike."""
    union = _tools_called(messages)
    return [
        p if p.tools is not None else Point(p.position, p.full, p.compressed, union, p.stratum)
        for p in points
    ]


def _tools_called(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Every tool the whole history called (open parameters): offered to both
    sides alike when the calls' own tools were not recorded."""
    names: dict[str, None] = {}
    for message in messages:
        for call in message.get("tool_calls") or ():
            names[str(call["function"]["name"])] = None
    return [
        {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
        for n in names
    ]


def _asker(decide: Decide) -> Callable[[list[Message], Point, str], Any]:
    """``decide`` called with what it accepts of the tools and the label."""
    try:
        names = set(inspect.signature(decide).parameters)
    except (TypeError, ValueError):
        names = set()

    def ask(messages: list[Message], point: Point, side: str) -> Any:
        extra: dict[str, Any] = {}
        if "tools" in names:
            extra["tools"] = point.tools
        if "label" in names:
            extra["label"] = f"probe {point.position} {side}"
        return decide(messages, **extra)

    return ask


def _measure(
    points: Sequence[Point],
    decide: Decide,
    same: Callable[[Any, Any], bool],
    counter: TokenCounter,
    *,
    baseline: bool,
    candidates: int,
    tools: str,
    handoff: dict[str, Any] | None,
) -> FidelityReport:
    ask = _asker(decide)
    agreements, repeats, disagreements = 0, 0, []
    for point in points:
        # Interleaved (full, compressed, full again), so drift in the model's
        # answers over the run falls on both comparisons alike.
        full_decision = ask(point.full, point, "full")
        compressed_decision = ask(point.compressed, point, "compacted")
        if baseline:
            repeats += int(same(full_decision, ask(point.full, point, "full again")))
        if same(full_decision, compressed_decision):
            agreements += 1
            continue
        disagreements.append(
            Disagreement(
                point.position,
                full_decision,
                compressed_decision,
                sum(count_message(m, counter) for m in point.full),
                sum(count_message(m, counter) for m in point.compressed),
            )
        )
    noiseless = baseline and repeats == len(points)
    return FidelityReport(
        len(points),
        agreements,
        disagreements,
        [p.position for p in points],
        Rate(repeats, len(points)) if baseline else None,
        candidates,
        tools,
        handoff,
        critical_loss(points, disagreements, ask, same) if noiseless else None,
    )


def critical_loss(
    points: Sequence[Point],
    disagreements: Sequence[Disagreement],
    ask: Callable[[list[Message], Point, str], Any],
    same: Callable[[Any, Any], bool],
) -> int | None:
    """The first disagreement whose compacted answer repeats when asked again
    (the floor having shown no noise), or None: the rule of the module doc."""
    by_position = {point.position: point for point in points}
    for disagreement in disagreements:
        point = by_position[disagreement.position]
        again = ask(point.compressed, point, "compacted again")
        if not same(disagreement.full, again):
            return disagreement.position
    return None


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


def decision_of(message: Mapping[str, Any]) -> Decision:
    """The decision an assistant message makes: its first tool call, or its text."""
    calls = message.get("tool_calls") or []
    if not calls:
        return Decision(None, str(message.get("content") or "")[:200])
    function = calls[0]["function"]
    return Decision(str(function["name"]), str(function.get("arguments") or ""))


DETERMINISTIC = {"temperature": 0}


def next_tool_call(
    client: Any = None,
    *,
    model: str,
    tools: Sequence[Mapping[str, Any]] | None = None,
    params: Mapping[str, Any] | None = None,
) -> Decide:
    """A ``decide`` function that asks a model for its next move, at temperature
    0 unless ``params`` says otherwise (``params={}`` sends none, for a model
    that refuses it). It offers ``tools`` if given, else the tools the recorded
    call had (``fidelity`` passes them)."""
    provider = provider_for(client if client is not None else default_client())
    if provider.is_async:
        raise ValueError("fidelity runs outside any event loop: give it a sync client")
    sent = dict(DETERMINISTIC if params is None else params)

    def decide(messages: list[Message], tools: Any = None) -> Decision:
        offered = list(tools if tools is not None else []) if given is None else given
        result = provider.complete(messages, model=model, tools=offered or None, params=sent)
        assert isinstance(result, Completion)
        return decision_of(result.message)

    given = None if tools is None else [dict(t) for t in tools]
    return decide
