"""The bound on the active context, and what compaction falls back on to keep it.

A conversation's ``max_context`` (default: twice its ``threshold``) is a hard
bound on the active context, as cairn counts it (``Conversation.tokens``).
The summarizer is what normally keeps the context under its threshold, but a
summarizer can keep failing: its answers cut off at their token cap, over the
summary budget, or its server down. Each such compaction is refused (no
truncated summary is ever stored) and the next try is held off, so without a
fallback the context grows without limit.

When the context is over the bound at a compaction, cairn therefore does not
leave it there: it asks the summarizer (unless a recent miss holds it off)
and, if no acceptable summary comes back, folds the head into an *extractive*
summary instead (``ExtractiveSummarizer``: no model, the previous summary
carried on), within ``summary_tokens``. The head is archived as in any
compaction; the summary row and the compaction's entry say it was a fallback
and why (``fallback``, ``fallback_reason``), ``cairn conversation`` shows it,
and a replay reads the recorded outcome, so it takes the same path.

The head is cut as usual, keeping ``keep_tail`` tokens, when that leaves room
under the bound for a summary (``fallback_cut``); else (a tail of huge
messages, or a bound close to ``keep_tail``) only the last message is kept,
with the tool results answering it. The summary gets what room is left, at
most ``summary_tokens``. If the last message alone does not fit, nothing can:
``ctx.llm`` then refuses to send the context, with an error that says so
(``over_bound_error``), rather than exceed the bound.
"""

from __future__ import annotations

from collections.abc import Sequence

from cairn.agent._window import Row, split_point
from cairn.agent.messages import Message
from cairn.agent.summarize import ExtractiveSummarizer, SummaryRequest, summary_message
from cairn.agent.tokens import TokenCounter, count_message

FALLBACK = "extractive"


def bound_of(name: str, threshold: int, max_context: int | None) -> int:
    """The hard bound of conversation ``name``: ``max_context``, or twice its
    threshold when it names none; one at or under the threshold is refused."""
    bound = 2 * threshold if max_context is None else max_context
    if bound <= threshold:
        raise ValueError(
            f"conversation {name!r}: max_context ({bound}) must be above threshold "
            f"({threshold}): it is the bound compaction falls back to keep"
        )
    return bound


# The fallback keeps the usual tail only if that leaves its summary at least
# this many tokens (or summary_tokens, if smaller); else it keeps the last message.
MIN_SUMMARY = 100
# Tokens kept free for how the summary's text and its header count together.
_SLACK = 4


def fallback_cut(
    tail: Sequence[Row], keep_tail: int, room: int, summary_tokens: int
) -> tuple[int, int]:
    """Where the fallback cuts ``tail`` (the index of the first row kept; 0:
    nothing to fold) and the summary's budget, for ``room`` tokens of context
    left for the kept rows and the summary's text: after ``keep_tail`` tokens
    as usual if that leaves the summary room enough (``MIN_SUMMARY``), else
    after the last message (and its tool results); the budget is what is
    left, at most ``summary_tokens``."""
    cut = split_point(tail, keep_tail)
    if cut > 0:
        left = room - sum(row.tokens for row in tail[cut:]) - _SLACK
        if left >= min(summary_tokens, MIN_SUMMARY):
            return cut, min(summary_tokens, left)
    tight = split_point(tail, 1) or cut
    left = room - sum(row.tokens for row in tail[tight:]) - _SLACK
    return tight, max(1, min(summary_tokens, left))


def extractive_text(
    previous: str | None, messages: Sequence[Message], budget: int, counter: TokenCounter
) -> str:
    """The fallback summary of ``messages`` folded into ``previous``, within
    ``budget`` tokens of summary text."""
    summarizer = ExtractiveSummarizer(max_tokens=budget)
    return summarizer(SummaryRequest(previous, messages, budget, counter)).text.strip()


def header_tokens(counter: TokenCounter) -> int:
    """The tokens a summary row takes beside its text (the header, the framing)."""
    return count_message(summary_message(""), counter)


def over_bound_error(name: str, tokens: int, bound: int) -> str:
    """The one line ``ctx.llm`` fails with when even the fallback could not
    bring the context under its bound."""
    return (
        f"conversation {name!r}: the active context is {tokens} tokens, over its bound of "
        f"{bound} (max_context) even after compaction kept only the last message: that "
        "message is too big to send within the bound; raise max_context, or keep such "
        "content out of the conversation (a blob, or a shorter tool result)"
    )
