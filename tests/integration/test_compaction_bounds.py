"""Bounded summaries: the summarizer's reply is capped, a summary that is cut off
or over budget is not stored, a compaction that leaves the context near the
threshold is reported and not repeated at every call, and a huge head is folded
in chunks that fit the summarizer's window.

Two local model servers (``tests/agent_server.py``), one for the agent and one
for the summarizer, so the summarizer's requests are counted at its server.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from cairn import Cairn, Context
from cairn.admin import conversation_detail
from cairn.agent import LLMSummarizer, tool_result, user
from cairn.agent.tokens import count_messages
from cairn.store import admin
from tests.agent_server import Scripted, model_server, openai_client
from tests.integration.store.test_conversation import history_entries

CALLS = 60
THRESHOLD = 2500


def long_summary(request: dict[str, Any]) -> dict[str, Any]:
    """A summarizer model whose summaries are ~2,500 tokens, as big as the threshold."""
    body = " ".join(f"item{i}" for i in range(1245))  # ~11,000 characters, ~2,500 tokens
    return {"role": "assistant", "content": f"Goal: read.\nDecisions:\n- {body}"}


def _agent(app: Cairn, client: Any, summarizer: LLMSummarizer, summary_tokens: int) -> Any:
    @app.task(name="agent")
    def agent(ctx: Context) -> dict[str, Any]:
        conv = ctx.conversation(
            "main",
            system="You answer.",
            threshold=THRESHOLD,
            keep_tail=500,
            summarizer=summarizer,
            summary_tokens=summary_tokens,
            client=client,
            # The hold alone: the fallback is tests/acceptance/test_bounded_context_sigkill.py's.
            max_context=100_000,
        )
        for turn in range(CALLS):
            conv.append(user(f"turn {turn}: " + "please note this fact. " * 16))
            ctx.llm(conv, model="gpt-4o-mini")
        stats = conv.stats
        return {"compactions": stats.compactions, "short": stats.short_compactions}

    return agent


@pytest.mark.parametrize(
    ("case", "max_tokens", "summary_tokens"),
    [
        ("cut off at the cap", 800, 800),  # the server stops at max_tokens: finish "length"
        ("over the budget", 3000, 800),  # finishes, but is 2,500 tokens against 800
        ("kept, but short of the threshold", 3000, 3000),
    ],
)
def test_summaries_as_big_as_the_threshold_do_not_compact_at_every_call(
    app: Cairn, caplog: pytest.LogCaptureFixture, case: str, max_tokens: int, summary_tokens: int
) -> None:
    """The reported case: a summarizer answering ~2,500 tokens against a 2,500
    threshold made 45 compactions in 60 calls. Now the summary is rejected (cut
    off, or over budget: nothing stored) or kept but reported as short, and the
    hold after each miss keeps the summarizer's server at a handful of requests."""
    with (
        model_server(Scripted(["Noted."])) as agent_server,
        model_server(long_summary) as summary_server,
    ):
        summarizer = LLMSummarizer(openai_client(summary_server), model="s", max_tokens=max_tokens)
        task = _agent(app, openai_client(agent_server), summarizer, summary_tokens)
        with caplog.at_level(logging.WARNING, logger="cairn"):
            result = app.run(task, task_id="t")
        assert agent_server.requests == CALLS
        assert 1 <= summary_server.requests <= 5, case
        sent = {body["max_tokens"] for body in summary_server.bodies}
    assert sent == {min(max_tokens, summary_tokens)}
    misses = [r for r in caplog.records if "compaction left" in r.getMessage()]
    assert len(misses) == summary_server.requests
    detail = conversation_detail(admin(app.store), "t")
    stats = detail.stats()
    if summary_tokens == 800:
        assert result == {"compactions": 0, "short": 0}
        assert not [r for r in app.store.load_messages("t", "main", 0, 500) if r.kind == "summary"]
    else:
        assert result["short"] == result["compactions"] >= 1
        assert stats["compactions short of the threshold"] == result["short"]


def test_a_huge_head_is_folded_in_chunks_that_fit_the_window(app: Cairn) -> None:
    """A head of ~40,000 tokens (one tool result alone ~12,000) against a
    summarizer window of 6,000: every request the summarizer's server receives
    fits the window, each carries the summary so far, each is recorded as a
    part of the compaction with its own usage, and one summary is stored."""
    window = 6000
    with model_server(Scripted(["Goal: read.\nNext step: more."])) as server:
        summarizer = LLMSummarizer(openai_client(server), model="s", max_tokens=300, window=window)

        @app.task(name="big")
        def big(ctx: Context) -> dict[str, Any]:
            conv = ctx.conversation(
                "main", threshold=4000, keep_tail=500, summarizer=summarizer, summary_tokens=300
            )
            for i in range(70):
                conv.append(user(f"note {i}: " + "the data says something. " * 80))
                if i == 30:
                    conv.append(tool_result("t1", "x" * 48_000))
            done = conv.compact()
            return {"ok": done.ok, "summary": conv.summary}

        result = app.run(big, task_id="b")
        bodies = server.bodies
    assert result["ok"]
    assert len(bodies) >= 7
    assert all(count_messages(body["messages"]) <= window for body in bodies)
    assert all(body["max_tokens"] == 300 for body in bodies)
    # Each chunk after the first folds into the summary so far.
    assert all("Goal: read." in body["messages"][1]["content"] for body in bodies[1:])
    assert any("cut to fit the summarizer's window" in b["messages"][1]["content"] for b in bodies)
    *parts, compaction = history_entries(app, "b", "conv")
    assert [part["part"] for part in parts] == list(range(1, len(bodies) + 1))
    sent = [count_messages(body["messages"]) for body in bodies]
    assert [part["usage"]["input_tokens"] for part in parts] == sent
    assert (compaction["parts"], "usage" in compaction) == (len(bodies), False)


def _chunked_task(app: Cairn, summarizer: LLMSummarizer) -> Any:
    """A task whose one compaction folds ~7,000 tokens in chunks of a 2,000-token
    window (four requests or more)."""

    @app.task(name="big", retry=None)
    def big(ctx: Context) -> dict[str, Any]:
        conv = ctx.conversation(
            "main",
            threshold=4000,
            keep_tail=500,
            summarizer=summarizer,
            summary_tokens=200,
            max_context=100_000,  # a failure stays a failure: no fallback under the bound
        )
        for i in range(16):
            conv.append(user(f"note {i}: " + "the data says something. " * 80))
        done = conv.compact()
        return {"ok": done.ok, "error": done.error}

    return big


def test_a_chunk_that_fails_keeps_the_cost_of_the_chunks_before_it(app: Cairn) -> None:
    """The summarizer's server fails the third chunk's request: the compaction
    fails and replaces nothing, and the summarizer's usage cairn cost counts is
    what the server counted for the two chunks it answered, which were paid
    for (it was none of it before; each is now in its part's entry)."""
    from cairn.agent.costs import cost_report

    with model_server(Scripted(["Goal: read.\nNext step: more."])) as server:
        summarizer = LLMSummarizer(openai_client(server), model="s", max_tokens=100, window=2000)
        answered = [0]

        def respond_then_fail(request: dict[str, Any]) -> dict[str, Any]:
            answered[0] += 1
            if answered[0] == 2:
                server.fail_next(1, 500, message="overloaded")
            return {"role": "assistant", "content": "Goal: read.\nNext step: more."}

        server.respond = respond_then_fail
        result = app.run(_chunked_task(app, summarizer), task_id="b")
        counted = (server.requests, server.prompt_tokens, server.completion_tokens)
    assert result["ok"] is False
    assert "InternalServerError" in result["error"]
    assert counted[0] == 3
    *parts, compaction = history_entries(app, "b", "conv")
    assert [part["part"] for part in parts] == [1, 2, 3]
    assert "InternalServerError" in parts[-1]["error"]
    assert (compaction["ok"], compaction["parts"]) == (False, 3)
    summarizer_usage = cost_report(app.store, task_id="b").total.summarizer_usage
    assert (summarizer_usage.input_tokens, summarizer_usage.output_tokens) == counted[1:]


def test_a_window_too_small_for_the_prompt_is_refused() -> None:
    """LLMSummarizer refuses a window that cannot hold its prompt, a previous
    summary and the reply, saying what to change."""
    with (
        model_server(Scripted(["x"])) as server,
        pytest.raises(ValueError, match="larger window or a smaller max_tokens"),
    ):
        LLMSummarizer(openai_client(server), model="s", max_tokens=800, window=1500)


def test_fidelity_replays_compaction_with_the_same_rejections_and_hold() -> None:
    """fidelity's replay of compaction follows the live rules: an over-budget
    summary is not used (the context stays whole), and after that miss the next
    try waits for keep_tail more tokens instead of coming at the next turn."""
    from cairn.agent.fidelity import simulated_contexts
    from cairn.agent.messages import assistant
    from cairn.agent.summarize import SUMMARY_HEADER, SummaryRequest
    from cairn.agent.tokens import DEFAULT_COUNTER

    asked: list[int] = []

    def too_long(request: SummaryRequest) -> str:
        asked.append(len(request.messages))
        return "word " * 2000  # ~2,500 tokens against a budget of 300

    messages = []
    for i in range(40):
        messages += [user(f"question {i} " + "detail " * 30), assistant(f"answer {i}")]
    points = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    contexts = simulated_contexts(
        messages,
        points,
        too_long,
        threshold=1000,
        keep_tail=300,
        counter=DEFAULT_COUNTER,
        summary_tokens=300,
        max_context=100_000,  # the hold alone: the fallback is test_bounded_context.py's
    )
    assert all(SUMMARY_HEADER not in str(c) for ctx in contexts.values() for c in ctx)
    assert len(contexts[points[-1]]) == points[-1]  # nothing was ever folded
    # Over 1,000 tokens from about turn 20 on: without the hold, ~20 tries.
    assert 1 <= len(asked) <= 4
