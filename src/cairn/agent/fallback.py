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

The head is cut as usual, keeping ``keep_tail`` tokens; when even that leaves
the context over the bound (a tail of huge messages), it keeps only the last
message, with the tool results answering it. If that last message alone does
not fit, nothing can: ``ctx.llm`` then refuses to send the context, with an
error that says so (``over_bound_error``), rather than exceed the bound.
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


def fallback_cut(tail: Sequence[Row], keep_tail: int, room: int) -> int:
    """Where the fallback cuts ``tail`` (the index of the first row kept; 0:
    nothing to fold): after ``keep_tail`` tokens as usual, or after the last
    message (and its tool results) when the usual tail is over ``room``."""
    cut = split_point(tail, keep_tail)
    if cut > 0 and sum(row.tokens for row in tail[cut:]) <= room:
        return cut
    tight = split_point(tail, 1)
    return tight if tight > 0 else cut


def extractive_text(
    previous: str | None, messages: Sequence[Message], budget: int, counter: TokenCounter
) -> str:
    """The fallback summary of ``messages`` folded into ``previous``, within
    ``budget`` tokens of summary text."""
    summarizer = ExtractiveSummarizer(max_tokens=budget)
    return summarizer(SummaryRequest(previous, messages, budget, counter)).text.strip()


def summary_row_tokens(budget: int, counter: TokenCounter) -> int:
    """At most how many tokens a fallback summary's row takes in the context
    (its text within ``budget``, with the summary header and the framing)."""
    return count_message(summary_message(""), counter) + budget


def over_bound_error(name: str, tokens: int, bound: int) -> str:
    """The one line ``ctx.llm`` fails with when even the fallback could not
    bring the context under its bound."""
    return (
        f"conversation {name!r}: the active context is {tokens} tokens, over its bound of "
        f"{bound} (max_context) even after compaction kept only the last message: that "
        "message is too big to send within the bound; raise max_context, or keep such "
        "content out of the conversation (a blob, or a shorter tool result)"
    )
