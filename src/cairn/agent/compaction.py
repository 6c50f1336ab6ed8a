"""Compaction: fold the head of the active context into the running summary.

When the active context is over ``threshold`` tokens, everything but the last
``keep_tail`` tokens or more (never splitting a tool call from its results, and
never the system prompt) goes to the summarizer together with the previous
summary. The new summary is appended as a row of kind ``summary``; the messages
it covers stay stored, as the archive.

The summarizer call is a history entry of kind ``conv`` made by the step
machine, so on replay its outcome is read back and the summarizer is not called.
A head folded in several requests (``ChunkedSummarizer``) records each request
as an entry of its own first, so that none is sent twice (``cairn.agent.chunked``).
A summarizer that fails, answers with nothing, is cut off at its token cap
(finish reason ``length`` / ``max_tokens``) or answers with more than the
summary budget (``summary_tokens``) replaces nothing: the outcome is recorded as
failed and the conversation stays whole.

A compaction that fails, or leaves the context within ``margin`` of the
threshold (so the next call would compact again), is a *miss*: it is logged,
counted (``ConversationStats.short_compactions`` for the ones that wrote a
summary), and compaction is not tried again until the context has grown by
``keep_tail`` tokens, twice that after a second miss in a row, and so on. Without
that, a summarizer whose summaries are as big as the threshold made a
compaction at nearly every call. The hold is part of each recorded outcome, so
a replay, or a process resumed after a crash, holds off exactly as the first run did.

A context over the conversation's hard bound (``max_context``) is compacted
whatever the hold says, and if the summarizer is held off or gives no
acceptable summary, the head is folded into an extractive summary instead
(``cairn.agent.fallback``), recorded in the same entry: the context never
stays over the bound, and a replay takes the same path.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cairn.agent._window import Row, split_point
from cairn.agent.chunked import Parts, described, in_parts, part_name, parts_machine
from cairn.agent.fallback import FALLBACK, extractive_text, fallback_cut, header_tokens
from cairn.agent.pricing import Usage
from cairn.agent.summarize import (
    TRUNCATED,
    Summary,
    SummaryFailed,
    SummaryRequest,
    SummaryResult,
    as_summary,
    is_async_summarizer,
    summary_message,
)
from cairn.agent.tokens import TokenCounter, count_message
from cairn.engine.run import Machine
from cairn.engine.steps import step_machine
from cairn.retry import NO_RETRY

if TYPE_CHECKING:
    from cairn.agent.conversation import Conversation
    from cairn.store.records import StepRecord

Outcome = dict[str, Any]
log = logging.getLogger("cairn")
# The hold after a miss doubles with each miss in a row, up to this many doublings.
_MAX_DOUBLINGS = 16


def margin(threshold: int) -> int:
    """How far under the threshold a compaction must bring the context to count as
    one that worked: a tenth of the threshold."""
    return max(1, threshold // 10)


@dataclass(frozen=True, slots=True)
class Compaction:
    """What one compaction did. On failure ``error`` says why and nothing changed."""

    ok: bool
    tokens_before: int
    tokens_after: int | None = None
    covers_until: int | None = None
    idx: int | None = None
    error: str | None = None

    @classmethod
    def of(cls, outcome: Outcome) -> Compaction:
        return cls(
            bool(outcome.get("ok")),
            int(outcome.get("tokens_before", 0)),
            outcome.get("tokens_after"),
            outcome.get("covers_until"),
            outcome.get("idx"),
            outcome.get("error"),
        )


@dataclass(frozen=True, slots=True)
class _Plan:
    head: list[Row]
    kept: list[Row]
    tokens_before: int


def _plan(conv: Conversation) -> _Plan | None:
    tail = conv._window.tail
    cut = split_point(tail, conv.keep_tail)
    if cut == 0:
        return None
    return _Plan(tail[:cut], tail[cut:], conv.tokens)


def _over(conv: Conversation) -> bool:
    """Whether the context is over its hard bound: compacted whatever the hold."""
    return conv.tokens > conv.max_context


def _held(conv: Conversation) -> bool:
    """Whether a recent miss holds the summarizer off here."""
    return conv._failed_at == conv.position or conv.tokens < conv._hold_until


def _fallback_plan(conv: Conversation) -> tuple[_Plan, int] | None:
    """The head the fallback folds, and its summary's budget
    (``cairn.agent.fallback.fallback_cut``)."""
    window = conv._window
    system = 0 if window.system is None else window.system.tokens
    room = conv.max_context - system - header_tokens(conv.counter)
    cut, budget = fallback_cut(window.tail, conv.keep_tail, room, conv.summary_tokens)
    if cut == 0:
        return None
    return _Plan(window.tail[:cut], window.tail[cut:], conv.tokens), budget


def _entry_name(conv: Conversation) -> str:
    return f"compact {conv.name}"


def _due(conv: Conversation, force: bool) -> bool:
    """Whether this point of the code compacts: read from the record while
    replaying, decided by the token count once past it."""
    run = conv._run
    upcoming = run.history.get(run.seq + 1)
    entry = _entry_name(conv)
    if (
        upcoming is not None
        and upcoming.kind == "conv"
        and upcoming.name in (entry, part_name(entry, 1))
    ):
        return _recorded_here(conv, upcoming)
    if conv.replaying:
        # A summary row the entry did not get to record (a crash between the two
        # commits) still means a compaction happened here.
        return conv.row_at(conv.position).kind == "summary"
    if not force and _over(conv):
        return _plan(conv) is not None or _fallback_plan(conv) is not None
    if not force and (conv.tokens <= conv.threshold or _held(conv)):
        return False
    return _plan(conv) is not None


def _recorded_here(conv: Conversation, entry: StepRecord) -> bool:
    """Whether the recorded compaction ``entry`` (or its first part) ran at this
    point of the code. ``compact()`` may be called at many points with no
    history entry between them (nothing is recorded where none was due), so the
    next entry alone does not say where it ran: a successful one wrote its
    summary row at its position, a failed one and a part noted the position."""
    if entry.status != "completed" or entry.output is None:
        return True
    outcome = conv._run.decode(entry.output, f"compaction {entry.name!r}")
    at = outcome.get("at", outcome.get("idx") if outcome.get("ok") else None)
    return at is None or int(at) == conv.position


def compaction_machine(conv: Conversation, *, force: bool = False) -> Machine[Compaction | None]:
    """Compact ``conv`` here if it is due (see ``_due``)."""
    if conv._run.poisoned is not None:
        raise conv._run.poisoned
    if not _due(conv, force):
        return None
    if _over(conv) and (_held(conv) or _plan(conv) is None) and not _parts_recorded(conv):
        # The summarizer is held off (or has nothing to fold): straight to the fallback.
        fn: Callable[[], Any] = _direct_fallback(conv)
        return (yield from _recorded(conv, fn))
    plan = _plan(conv)
    parts = None
    request = None if plan is None else _request(conv, plan)
    chunks = None if request is None else in_parts(conv, _entry_name(conv), request)
    if plan is not None and request is not None and chunks is not None:
        parts = yield from parts_machine(conv, _entry_name(conv), plan.head, request, chunks)
    if parts is None and is_async_summarizer(conv.summarizer):
        fn = _async_compact(conv, plan)
    else:
        fn = _sync_compact(conv, plan, parts)
    return (yield from _recorded(conv, fn))


def _parts_recorded(conv: Conversation) -> bool:
    """Whether the record holds a compaction in parts here (one a cairn without
    the bound made): it replays as recorded, never as a direct fallback."""
    upcoming = conv._run.history.get(conv._run.seq + 1)
    return upcoming is not None and upcoming.name == part_name(_entry_name(conv), 1)


def _recorded(conv: Conversation, fn: Callable[[], Any]) -> Machine[Compaction]:
    """The compaction's entry, made by calling ``fn`` (or replayed), taken in."""
    outcome: Outcome = yield from step_machine(
        conv._run,
        "conv",
        _entry_name(conv),
        fn,
        (),
        {},
        NO_RETRY,
    )
    if outcome.get("ok"):
        row = conv.row_at(int(outcome["idx"]))
        if row.idx != conv.position or row.kind != "summary":
            conv.diverge(row, f"the summary of compaction {outcome['idx']}")
        conv.take(row)
    else:
        conv._failed_at = conv.position
    # Outcomes recorded before holds existed carry none: no hold.
    conv._misses = int(outcome.get("misses", 0))
    conv._hold_until = int(outcome.get("hold_until", 0))
    return Compaction.of(outcome)


def _hold(conv: Conversation, tokens_after: int, missed: bool) -> dict[str, int]:
    """The misses in a row and the hold they set, for a compaction leaving
    ``tokens_after`` tokens (see the module doc)."""
    if not missed:
        return {"misses": 0, "hold_until": 0}
    misses = conv._misses + 1
    return {"misses": misses, "hold_until": hold_after(misses, tokens_after, conv.keep_tail)}


def _report_miss(conv: Conversation, outcome: Outcome) -> None:
    """Log a compaction that left the context too close to the threshold."""
    after = outcome.get("tokens_after", outcome.get("tokens_before"))
    log.warning(
        "task %s, conversation %r: compaction left %s tokens against a threshold of %d (%s); "
        "not compacting again before %d tokens",
        conv.task_id,
        conv.name,
        after,
        conv.threshold,
        outcome.get("error") or "the summary and the kept tail are too big",
        outcome["hold_until"],
    )


def _adopted(conv: Conversation) -> Outcome | None:
    """The outcome of a compaction whose summary row is stored but whose entry
    is not: read back from the row, without calling the summarizer again."""
    if not conv.replaying:
        return None
    row = conv.row_at(conv.position)
    if row.kind != "summary":
        return None
    return {"ok": True, "idx": row.idx, **(row.meta or {})}


def _request(conv: Conversation, plan: _Plan) -> SummaryRequest:
    messages = [row.message for row in plan.head]
    return SummaryRequest(conv.summary, messages, conv.summary_tokens, conv.counter)


def _sync_compact(
    conv: Conversation, plan: _Plan | None, parts: Parts | None
) -> Callable[[], Outcome]:
    """The compaction entry's function: the summarizer called, or, for a head
    folded in parts, the parts' summary taken (nothing is sent)."""

    def compact() -> Outcome:
        adopted = _adopted(conv)
        if adopted is not None or plan is None:
            return adopted or _failed(conv, None, "nothing to fold: the tail is all there is")
        if parts is not None:
            return _from_parts(conv, plan, parts)
        try:
            result = conv.summarizer(_request(conv, plan))
        except Exception as exc:  # noqa: BLE001 - a failed summary replaces nothing
            return _failed_summary(conv, plan, exc)
        return _finish(conv, plan, result)  # type: ignore[arg-type]

    return compact


def _async_compact(conv: Conversation, plan: _Plan | None) -> Callable[[], Awaitable[Outcome]]:
    async def compact() -> Outcome:
        adopted = _adopted(conv)
        if adopted is not None or plan is None:
            return adopted or _failed(conv, None, "nothing to fold: the tail is all there is")
        try:
            result = await conv.summarizer(_request(conv, plan))  # type: ignore[misc]
        except Exception as exc:  # noqa: BLE001 - a failed summary replaces nothing
            return _failed_summary(conv, plan, exc)
        return _finish(conv, plan, result)

    return compact


def _from_parts(conv: Conversation, plan: _Plan, parts: Parts) -> Outcome:
    """The outcome of a compaction whose head was folded in ``parts``: their
    summary kept (or rejected), or the error that ended them. The parts'
    entries hold the usage of their requests, so this one holds none."""
    if parts.error is not None or parts.summary is None:
        error = parts.error or "the summarizer answered no part"
        return _missed(conv, plan, error, {"parts": parts.count})
    return _finish(conv, plan, parts.summary, parts=parts.count)


def _failed(conv: Conversation, plan: _Plan | None, error: str) -> Outcome:
    tokens = conv.tokens if plan is None else plan.tokens_before
    outcome = {
        "ok": False,
        "at": conv.position,
        "error": error,
        "tokens_before": tokens,
        "summarizer": _summarizer_name(conv),
        **_hold(conv, tokens, missed=True),
    }
    _report_miss(conv, outcome)
    return outcome


def _failed_summary(conv: Conversation, plan: _Plan, error: Exception) -> Outcome:
    """The outcome of a summarizer that raised ``error``; with the usage of the
    calls it had made before (paid for: ``SummaryFailed``), so that ``cairn
    cost`` counts them. Over the bound, the fallback's."""
    if not isinstance(error, SummaryFailed):
        return _missed(conv, plan, described(error), {})
    paid = error.paid
    return _missed(conv, plan, described(error.error), _usage_fields(conv, paid.usage, paid.model))


def _missed(conv: Conversation, plan: _Plan | None, error: str, paid: dict[str, Any]) -> Outcome:
    """A summary that failed or was refused: the fallback's summary when the
    context is over its bound, else a failed compaction (nothing replaced)."""
    if _over(conv):
        return _fall_back(conv, error, paid, asked=True)
    return {**_failed(conv, plan, error), **paid}


def _direct_fallback(conv: Conversation) -> Callable[[], Outcome]:
    """The entry's function when the summarizer is held off over the bound."""

    def compact() -> Outcome:
        adopted = _adopted(conv)
        if adopted is not None:
            return adopted
        reason = (
            f"the summarizer is held off after {conv._misses} miss(es) in a row "
            f"(until {conv._hold_until} tokens)"
        )
        return _fall_back(conv, reason, {}, asked=False)

    return compact


def _fall_back(conv: Conversation, reason: str, paid: dict[str, Any], *, asked: bool) -> Outcome:
    """Fold the head into an extractive summary, the context being over its
    bound (``cairn.agent.fallback``); ``reason`` says why the summarizer's
    would not do, ``paid`` carries the usage of its calls, ``asked`` whether
    it was asked (a miss more, so a longer hold)."""
    planned = _fallback_plan(conv)
    if planned is None:
        return {**_failed(conv, None, f"{reason}; and nothing can be folded"), **paid}
    plan, budget = planned
    messages = [row.message for row in plan.head]
    text = extractive_text(conv.summary, messages, budget, conv.counter)
    misses = conv._misses + int(asked)
    extra = {"fallback": FALLBACK, "fallback_reason": reason, **paid}
    outcome = _summary_row(conv, plan, text, extra, misses=max(1, misses))
    log.warning(
        "task %s, conversation %r: %s; the head (%d messages) was folded into an extractive "
        "summary instead, leaving %s tokens against a bound of %d (max_context)",
        conv.task_id,
        conv.name,
        reason,
        len(plan.head),
        outcome["tokens_after"],
        conv.max_context,
    )
    return outcome


def _rejected(conv: Conversation, summary: Summary, text: str) -> str | None:
    return rejection(summary, text, conv.counter, conv.summary_tokens)


def rejection(summary: Summary, text: str, counter: TokenCounter, budget: int) -> str | None:
    """Why ``summary`` (whose text is ``text``) may not replace the head, or None
    if it may: empty, cut off at the summarizer's cap, or over ``budget`` tokens."""
    if not text:
        return "the summarizer returned an empty summary"
    if summary.finish_reason in TRUNCATED:
        return (
            f"the summary was cut off at the summarizer's token cap (finish reason "
            f"{summary.finish_reason!r})"
        )
    size = counter.count(text)
    usage = summary.usage
    if usage is not None and not usage.estimated and 0 < usage.output_tokens < size:
        size = usage.output_tokens  # the provider counted the reply itself
    if size > budget:
        return f"the summary is {size} tokens, over the summary budget of {budget} (summary_tokens)"
    return None


def hold_after(misses: int, tokens_after: int, keep_tail: int) -> int:
    """The token count below which no compaction is tried after ``misses`` misses
    in a row, the last leaving ``tokens_after`` tokens."""
    doublings = max(0, min(misses - 1, _MAX_DOUBLINGS))
    return tokens_after + keep_tail * (1 << doublings)


def _summarizer_name(conv: Conversation) -> str:
    return str(getattr(conv.summarizer, "name", type(conv.summarizer).__name__))


def _finish(conv: Conversation, plan: _Plan, result: SummaryResult, *, parts: int = 0) -> Outcome:
    """Write the summary row of ``result`` (unless it is rejected) and return the
    outcome. A summary folded in ``parts`` records no usage: each part's entry
    holds its own. Over the bound, a summary rejected gives way to the
    fallback's, and so does one that would leave the context over it."""
    summary = as_summary(result)
    text = summary.text.strip()
    paid = {"parts": parts} if parts else _usage_fields(conv, summary.usage, summary.model)
    rejected = _rejected(conv, summary, text)
    if rejected is not None:
        return _missed(conv, plan, rejected, paid)
    after = _tokens_after(conv, plan, count_message(summary_message(text), conv.counter))
    if after > conv.max_context:
        # Kept, it would leave the context over the bound, over it already or not.
        reason = f"the summary left {after} tokens, over the bound of {conv.max_context}"
        return _fall_back(conv, reason, paid, asked=True)
    return _summary_row(conv, plan, text, paid)


def _tokens_after(conv: Conversation, plan: _Plan, summary_tokens: int) -> int:
    window = conv._window
    system_tokens = 0 if window.system is None else window.system.tokens
    return system_tokens + summary_tokens + sum(row.tokens for row in plan.kept)


def _summary_row(
    conv: Conversation,
    plan: _Plan,
    text: str,
    extra: dict[str, Any],
    *,
    misses: int | None = None,
) -> Outcome:
    """Write the summary row of ``text`` folding ``plan``'s head, with ``extra``
    in its meta, and return the compaction's outcome. ``misses`` (a fallback's)
    sets the hold from the misses in a row, whatever the context left."""
    message = summary_message(text)
    tokens = count_message(message, conv.counter)
    before = conv.stats
    head_tokens = sum(row.full_tokens for row in plan.head)
    after = _tokens_after(conv, plan, tokens)
    short = after > conv.threshold - margin(conv.threshold)
    if misses is None:
        hold = _hold(conv, after, missed=short)
    else:
        hold = {"misses": misses, "hold_until": hold_after(misses, after, conv.keep_tail)}
    fallback = "fallback" in extra
    meta: dict[str, Any] = {
        "covers_until": plan.head[-1].idx,
        "tokens_before": plan.tokens_before,
        "tokens_after": after,
        "short": short,
        "short_compactions": before.short_compactions + int(short),
        **hold,
        "head_messages": len(plan.head),
        "head_tokens": head_tokens,
        "archived_messages": before.archived_messages + len(plan.head),
        "archived_tokens": before.archived_tokens + head_tokens,
        "compactions": before.compactions + 1,
        "fallback_compactions": before.fallback_compactions + int(fallback),
        "summarizer": _summarizer_name(conv),
        **extra,
    }
    row = Row(conv.position, message, tokens, "summary", plan.head[-1].idx, meta)
    conv.write(row)
    if short and not fallback:
        _report_miss(conv, meta)
    return {"ok": True, "idx": row.idx, **meta}


def _usage_fields(conv: Conversation, usage: Usage | None, model: str | None) -> dict[str, Any]:
    if usage is None:
        return {}
    return {"model": model, "usage": usage.to_dict(), "cost": conv.prices.cost(model, usage)}
