"""Fidelity's decision points: where to probe, and the two contexts at each.

A decision point is a model turn (an assistant message) that came after a
compaction. At each one ``cairn.agent.fidelity`` compares the decision made on
the full history with the one made on the context the agent had. This module
finds the points and builds both contexts:

* from a recorded conversation's rows (``recorded_points``): the context the
  agent really had, and the tools that call really offered (its reply row
  records their digest, and their schemas the first time: ``cairn.agent.llm``);
  for a conversation started from a handoff, the full history is the earlier
  conversation's archive followed by this one's own messages;
* from plain messages and a summarizer (``simulated_points``): the compaction
  replayed with the live rules (``simulated_contexts``).

``stratified`` picks at most ``cap`` of them: every point when they fit,
otherwise a seeded random sample in each stretch between two compactions,
each stretch in proportion to its size.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cairn.agent._window import Row, Window, split_point
from cairn.agent.archive import StoredMessage
from cairn.agent.compaction import hold_after, margin, rejection
from cairn.agent.fallback import extractive_text, fallback_cut, header_tokens
from cairn.agent.messages import Message
from cairn.agent.summarize import (
    SUMMARY_HEADER,
    Summarizer,
    SummaryRequest,
    as_summary,
    summary_message,
    summary_text,
)
from cairn.agent.tokens import TokenCounter, count_message

Tools = list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Point:
    """One decision point: its position among the full history's messages, both
    contexts, the tools the call offered (None: not recorded), and its stratum
    (how many compactions came before it)."""

    position: int
    full: list[Message]
    compressed: list[Message]
    tools: Tools | None
    stratum: int


# -- sampling --------------------------------------------------------------------------
def stratified(candidates: Sequence[tuple[int, int]], cap: int, seed: int) -> list[int]:
    """The positions to probe among ``candidates`` (position, stratum): all of them
    when there are at most ``cap``, else ``cap`` drawn at random (seeded) with
    each stratum's share in proportion to its size (largest remainders)."""
    if cap <= 0:
        raise ValueError(f"the probe cap must be above 0, not {cap}")
    if len(candidates) <= cap:
        return sorted(position for position, _ in candidates)
    groups: dict[int, list[int]] = {}
    for position, stratum in candidates:
        groups.setdefault(stratum, []).append(position)
    exact = {s: cap * len(g) / len(candidates) for s, g in groups.items()}
    quota = {s: int(share) for s, share in exact.items()}
    by_remainder = sorted(groups, key=lambda s: (quota[s] - exact[s], s))
    for stratum in by_remainder[: cap - sum(quota.values())]:
        quota[stratum] += 1
    rng = random.Random(seed)
    chosen = [p for s, g in groups.items() for p in rng.sample(g, quota[s])]
    return sorted(chosen)


# -- from recorded rows ------------------------------------------------------------------
def _walk(
    rows: Sequence[StoredMessage], before: Sequence[Message] | None, wanted: set[int] | None
) -> tuple[list[tuple[int, int]], list[Point], list[Message]]:
    """Go through the rows as the conversation did: the candidate points, the
    points in ``wanted`` built, and the full history's messages."""
    full: list[Message] = []
    seeded = _seeded_rows(rows) if before is not None else 0
    if before is not None:
        full = list(before)
        own_system = rows[0].message if rows and rows[0].message["role"] == "system" else None
        if own_system is not None and full and full[0]["role"] == "system":
            full[0] = own_system  # the system prompt this conversation was given
    candidates: list[tuple[int, int]] = []
    points: list[Point] = []
    schemas: dict[str, Tools] = {}
    window, compactions = Window(), 0
    for stored in rows:
        meta = stored.meta or {}
        if "tool_schemas" in meta:
            schemas[str(meta["tools"])] = list(meta["tool_schemas"])
        if stored.kind == "summary":
            compactions += 1
        elif stored.idx >= seeded:
            if stored.message["role"] == "assistant" and compactions:
                position = len(full)
                candidates.append((position, compactions))
                if wanted is None or position in wanted:
                    tools = schemas.get(str(meta["tools"])) if "tools" in meta else None
                    points.append(
                        Point(position, full[:position], window.messages(), tools, compactions)
                    )
            full.append(stored.message)
        # With its meta, so that a reply row clears what its call had cleared.
        window.add(
            Row(stored.idx, stored.message, stored.tokens, stored.kind, stored.covers_until, meta)
        )
    return candidates, points, full


def _seeded_rows(rows: Sequence[StoredMessage]) -> int:
    """How many rows a conversation opened from a handoff was seeded with."""
    origin = (rows[0].meta or {}).get("handoff") if rows else None
    return int((origin or {}).get("seeded_rows", 0))


def handoff_origin(rows: Sequence[StoredMessage]) -> dict[str, Any] | None:
    """Where a conversation started from a handoff came from (its first row's
    record of the document), or None."""
    origin = (rows[0].meta or {}).get("handoff") if rows else None
    return dict(origin) if isinstance(origin, Mapping) else None


def recorded_points(
    rows: Sequence[StoredMessage],
    *,
    cap: int,
    seed: int,
    probes: int | Sequence[int] | None = None,
    before: Sequence[Message] | None = None,
) -> tuple[list[Point], int, list[Message]]:
    """The points to probe in a recorded conversation, how many candidates there
    were, and the full history. ``before``: the messages of the conversation it
    was handed off from (its archive), which the full history starts with."""
    candidates, _, full = _walk(rows, before, set())
    chosen = _chosen(candidates, probes, cap, seed)
    _, points, _ = _walk(rows, before, set(chosen))
    return points, len(candidates), full


def _chosen(
    candidates: list[tuple[int, int]], probes: int | Sequence[int] | None, cap: int, seed: int
) -> list[int]:
    if probes is None:
        return stratified(candidates, cap, seed)
    if isinstance(probes, int):
        if probes <= 0:
            raise ValueError(f"probes must be above 0 (or None for every point), not {probes}")
        return stratified(candidates, probes, seed)
    known = {position for position, _ in candidates}
    return sorted(set(probes) & known)


# -- from plain messages, compacting as a conversation would ---------------------------------
def simulated_points(
    messages: Sequence[Message],
    summarizer: Summarizer,
    *,
    probes: int | Sequence[int] | None,
    cap: int,
    seed: int,
    threshold: int,
    keep_tail: int,
    counter: TokenCounter,
    summary_tokens: int,
    max_context: int | None = None,
) -> tuple[list[Point], int]:
    """The points to probe in ``messages`` compacted by ``summarizer``: model turns
    whose simulated context is not the full history, and how many there were."""
    turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    contexts = simulated_contexts(
        messages,
        turns,
        summarizer,
        threshold=threshold,
        keep_tail=keep_tail,
        counter=counter,
        summary_tokens=summary_tokens,
        max_context=max_context,
    )
    candidates: list[tuple[int, int]] = []
    strata = 0
    for position in turns:
        context = contexts[position]
        if context == list(messages[:position]):
            continue
        if len(candidates) == 0 or _summary_of(context) != _summary_of(contexts[candidates[-1][0]]):
            strata += 1
        candidates.append((position, strata))
    chosen = _chosen(candidates, probes, cap, seed)
    by_position = dict(candidates)
    points = [
        Point(p, list(messages[:p]), contexts[p], None, by_position[p])
        for p in chosen
        if p in by_position
    ]
    return points, len(candidates)


def _summary_of(context: Sequence[Message]) -> str | None:
    """The summary text a context starts with (after its system prompt), if any."""
    for message in context:
        if message["role"] != "system":
            content = str(message.get("content") or "")
            return content if content.startswith(SUMMARY_HEADER) else None
    return None


def simulated_contexts(
    messages: Sequence[Message],
    points: Sequence[int],
    summarizer: Summarizer,
    *,
    threshold: int,
    keep_tail: int,
    counter: TokenCounter,
    summary_tokens: int,
    max_context: int | None = None,
) -> dict[int, list[Message]]:
    """The compressed context at each of ``points``, compacting as a live
    conversation would (before each model turn, when over ``threshold``; over
    the bound, ``max_context``, with the extractive fallback when the
    summarizer is held off or its summary will not do: cairn.agent.fallback)."""
    wanted, found = set(points), {}
    window, last = Window(), max(points, default=-1)
    bound = 2 * threshold if max_context is None else max_context
    misses, hold = 0, 0  # the hold after a miss, as cairn.agent.compaction keeps it
    for idx, message in enumerate(messages[: last + 1]):
        tokens = window.tokens()
        due = tokens > threshold and tokens >= hold
        over = tokens > bound
        if message["role"] == "assistant" and (due or over):
            cut, text = (0, None)
            if due:
                cut, text = _summarized(window, summarizer, keep_tail, counter, summary_tokens)
            too_big = text is not None and _after(window, cut, text, counter) > bound
            if too_big:
                text = None  # it would leave the context over the bound
            if text is not None:
                _fold(window, cut, text, counter, idx)
                if window.tokens() > threshold - margin(threshold):
                    misses += 1
                    hold = hold_after(misses, window.tokens(), keep_tail)
                else:
                    misses, hold = 0, 0
            elif over or too_big:
                misses += int(due)
                _fall_back(window, bound, keep_tail, counter, summary_tokens, idx)
                hold = hold_after(max(1, misses), window.tokens(), keep_tail)
            elif cut:
                misses += 1
                hold = hold_after(misses, tokens, keep_tail)
        if idx in wanted:
            found[idx] = window.messages()
        # Rows at even positions leave room for a summary row just before each.
        window.add(Row(2 * idx, message, count_message(message, counter)))
    return found


def _previous(window: Window) -> str | None:
    return None if window.summary is None else summary_text(window.summary.message)


def _summarized(
    window: Window,
    summarizer: Summarizer,
    keep_tail: int,
    counter: TokenCounter,
    summary_tokens: int,
) -> tuple[int, str | None]:
    """Where the head ends (0: nothing to fold), and the summarizer's summary
    of it (None: refused, as compaction refuses one)."""
    cut = split_point(window.tail, keep_tail)
    if cut == 0:
        return 0, None
    head = window.tail[:cut]
    request = SummaryRequest(_previous(window), [r.message for r in head], summary_tokens, counter)
    summary = as_summary(summarizer(request))  # type: ignore[arg-type]
    text = summary.text.strip()
    return cut, text if rejection(summary, text, counter, summary_tokens) is None else None


def _after(window: Window, cut: int, text: str, counter: TokenCounter) -> int:
    """The context's tokens once the head before ``cut`` is folded into ``text``."""
    system = 0 if window.system is None else window.system.tokens
    kept = sum(row.tokens for row in window.tail[cut:])
    return system + count_message(summary_message(text), counter) + kept


def _fold(window: Window, cut: int, text: str, counter: TokenCounter, idx: int) -> None:
    message = summary_message(text)
    covers = window.tail[cut - 1].idx
    window.add(Row(2 * idx - 1, message, count_message(message, counter), "summary", covers))


def _fall_back(
    window: Window,
    bound: int,
    keep_tail: int,
    counter: TokenCounter,
    summary_tokens: int,
    idx: int,
) -> None:
    """The extractive fallback's fold, as cairn.agent.compaction makes it."""
    system = 0 if window.system is None else window.system.tokens
    room = bound - system - header_tokens(counter)
    cut, budget = fallback_cut(window.tail, keep_tail, room, summary_tokens)
    if cut == 0:
        return
    head = [row.message for row in window.tail[:cut]]
    text = extractive_text(_previous(window), head, budget, counter)
    _fold(window, cut, text, counter, idx)
