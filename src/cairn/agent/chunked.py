"""A compaction folded in chunks: each chunk's summary a history entry of its own.

A head too big for one summarizer request is folded in chunks, one request
each, every chunk's summary becoming the next one's previous summary
(``ChunkedSummarizer``: ``LLMSummarizer`` is one). Each chunk is recorded as it
is answered, as an entry of kind ``conv`` named ``compact NAME: part N``,
before the next request is sent; the compaction's own entry (``compact NAME``)
follows the last part and sends nothing. So a process killed between two
chunks sends, when it runs again, only the chunks whose answer it had not
recorded: none is paid for twice.

A part's entry records where the compaction ran (``at``), the last head row its
chunk reached (``through``), the summary so far (``text``, at most the
summarizer's reply cap), and that request's usage and cost, which ``cairn cost``
counts once, as the summarizer's. A part whose request failed records the error
and ends the parts: the compaction then records the failure and replaces
nothing. A part cut off at the reply cap ends them too, and the compaction
rejects its summary as it rejects any cut-off one.

A head that fits one request is one entry, as before chunks were entries, and
so is every compaction of a summarizer that does not chunk. A chunked
compaction recorded as one entry, as cairn recorded them before parts were
entries, replays from that entry: the machine looks at what the record holds at
its position before it decides.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cairn.agent.pricing import Usage
from cairn.agent.provider_errors import redact
from cairn.agent.summarize import (
    TRUNCATED,
    ChunkedSummarizer,
    Summary,
    SummaryRequest,
    chunk_request,
    is_async_summarizer,
)
from cairn.engine.run import Machine
from cairn.engine.steps import step_machine
from cairn.retry import NO_RETRY

if TYPE_CHECKING:
    from cairn.agent._window import Row
    from cairn.agent.conversation import Conversation
    from cairn.agent.messages import Message
    from cairn.store.records import StepRecord

Outcome = dict[str, Any]


def part_name(entry: str, number: int) -> str:
    """The entry name of part ``number`` (from 1) of the compaction ``entry``."""
    return f"{entry}: part {number}"


@dataclass(frozen=True, slots=True)
class Parts:
    """What the parts of one compaction came to: how many were recorded, the
    summary of the last one answered (None if none was), and the error that
    ended them (None if none did)."""

    count: int
    summary: Summary | None
    error: str | None


def described(error: Exception) -> str:
    """A summarizer's error as it is recorded: any summarizer's text may echo a
    key (the SDKs' errors are redacted already, cairn.agent.provider_errors)."""
    return redact(f"{type(error).__name__}: {error}")


def _upcoming(conv: Conversation) -> StepRecord | None:
    run = conv._run
    return run.history.get(run.seq + 1)


def in_parts(conv: Conversation, entry: str, request: SummaryRequest) -> list[list[Message]] | None:
    """Whether the compaction ``entry`` of ``request``'s head goes in parts here,
    as the record holds it ([]: replay them), or, past the record, because the
    summarizer chunks and the head takes more than one request (its chunks, to
    send); None when it is one entry."""
    summarizer = conv.summarizer
    if not isinstance(summarizer, ChunkedSummarizer):
        return None
    upcoming = _upcoming(conv)
    if upcoming is not None and upcoming.kind == "conv":
        return [] if upcoming.name == part_name(entry, 1) else None
    if upcoming is not None or conv.replaying:
        # Recorded otherwise, or a summary row its entry did not get to record
        # (which compaction adopts): nothing is sent in parts.
        return None
    groups = summarizer.chunks(request)
    return groups if len(groups) > 1 else None


def parts_machine(
    conv: Conversation,
    entry: str,
    head: list[Row],
    request: SummaryRequest,
    chunks: list[list[Message]],
) -> Machine[Parts]:
    """Record (or replay) each part of the compaction ``entry`` folding ``head``
    (in ``chunks``, or as recorded when they are []), until the head is folded,
    a part fails, or one is cut off at the reply cap."""
    summarizer = conv.summarizer
    assert isinstance(summarizer, ChunkedSummarizer)
    folded, count, summary = 0, 0, None
    groups = list(chunks)
    while folded < len(head):
        count += 1
        name = part_name(entry, count)
        live = not _recorded(conv, name)
        if live and not groups:
            # Chunked once, from the first part not recorded: the chunks of a
            # head's rest are the rest of its chunks.
            groups = summarizer.chunks(_rest(request, folded))
        part = groups.pop(0) if groups else []
        if live and not part:
            raise ValueError(
                f"{type(summarizer).__name__}.chunks gave no chunk for the {len(head) - folded} "
                "messages left to fold: it must split them all into consecutive groups"
            )
        where = {"part": count, "at": conv.position}
        if part:
            where["through"] = head[folded + len(part) - 1].idx
        fn = _part(conv, chunk_request(request, summary, part), where)
        outcome: Outcome = yield from step_machine(conv._run, "conv", name, fn, (), {}, NO_RETRY)
        if "error" in outcome:
            return Parts(count, summary, str(outcome["error"]))
        summary = _summary_of(outcome)
        folded = _folded_through(conv, head, outcome, name)
        if summary.finish_reason in TRUNCATED:
            break
    return Parts(count, summary, None)


def _recorded(conv: Conversation, name: str) -> bool:
    """Whether the record holds part ``name`` next, answered (a part's entry is
    written only once its function returned, so it always is)."""
    upcoming = _upcoming(conv)
    return upcoming is not None and upcoming.name == name and upcoming.status == "completed"


def _rest(request: SummaryRequest, folded: int) -> SummaryRequest:
    messages = request.messages[folded:]
    return SummaryRequest(request.previous, messages, request.max_tokens, request.counter)


def _folded_through(conv: Conversation, head: list[Row], outcome: Outcome, name: str) -> int:
    """How many rows of ``head`` are folded once the part ``outcome`` is: up to the
    row it names. A head that no longer holds it (the code now cuts the head
    elsewhere) cannot go on from it."""
    through = int(outcome["through"])
    at = next((at for at, row in enumerate(head) if row.idx == through), None)
    if at is None:
        run = conv._run
        run.diverge(
            run.seq,
            f"conv {name} folding the head through row {through}",
            f"a head of rows {head[0].idx} to {head[-1].idx}",
        )
    return at + 1


def _summary_of(outcome: Outcome) -> Summary:
    usage = Usage.from_dict(outcome.get("usage"))
    return Summary(str(outcome["text"]), usage, outcome.get("model"), outcome.get("finish_reason"))


def _part(
    conv: Conversation, request: SummaryRequest, where: dict[str, int]
) -> Callable[[], Outcome | Awaitable[Outcome]]:
    """The function of one part's entry: one request of the summarizer's, its
    outcome recorded with ``where`` (an error too: it ends the parts, not the
    task). Replayed, it is not called."""
    summarizer = conv.summarizer
    assert isinstance(summarizer, ChunkedSummarizer)

    def fold() -> Outcome:
        try:
            summary = summarizer.fold_chunk(request)
        except Exception as exc:  # noqa: BLE001 - a failed part replaces nothing
            return {**where, "error": described(exc)}
        assert isinstance(summary, Summary)
        return _answered(conv, where, summary)

    async def afold() -> Outcome:
        try:
            summary = await summarizer.fold_chunk(request)  # type: ignore[misc]
        except Exception as exc:  # noqa: BLE001 - a failed part replaces nothing
            return {**where, "error": described(exc)}
        return _answered(conv, where, summary)

    return afold if is_async_summarizer(summarizer) else fold


def _answered(conv: Conversation, where: dict[str, int], summary: Summary) -> Outcome:
    outcome: Outcome = {**where, "text": summary.text, "finish_reason": summary.finish_reason}
    if summary.usage is not None:
        usage = summary.usage
        cost = conv.prices.cost(summary.model, usage)
        outcome.update(model=summary.model, usage=usage.to_dict(), cost=cost)
    return outcome
