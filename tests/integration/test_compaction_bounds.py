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
    fits the window, each carries the summary so far, and one summary is stored
    with the usage of all the calls."""
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
    (compaction,) = history_entries(app, "b", "conv")
    assert compaction["usage"]["input_tokens"] == sum(count_messages(b["messages"]) for b in bodies)


def _chunked_task(app: Cairn, summarizer: LLMSummarizer) -> Any:
    """A task whose one compaction folds ~7,000 tokens in chunks of a 2,000-token
    window (four requests or more)."""

    @app.task(name="big", retry=None)
    def big(ctx: Context) -> dict[str, Any]:
        conv = ctx.conversation(
            "main", threshold=4000, keep_tail=500, summarizer=summarizer, summary_tokens=200
        )
        for i in range(16):
            conv.append(user(f"note {i}: " + "the data says something. " * 80))
        done = conv.compact()
        return {"ok": done.ok, "error": done.error}

    return big


def test_a_chunk_that_fails_keeps_the_cost_of_the_chunks_before_it(app: Cairn) -> None:
    """The summarizer's server fails the third chunk's request: the compaction
    fails and replaces nothing, and its recorded usage (what cairn cost counts as
    the summarizer's) is what the server counted for the two chunks it answered,
    which were paid for; it was none of it before."""
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
    (compaction,) = history_entries(app, "b", "conv")
    usage = compaction["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == counted[1:]
    summarizer_usage = cost_report(app.store, task_id="b").total.summarizer_usage
    assert (summarizer_usage.input_tokens, summarizer_usage.output_tokens) == counted[1:]


class Crash(BaseException):
    """Stands for the process dying between two requests."""


@pytest.mark.xfail(
    strict=True,
    reason="a compaction's chunks are one recorded entry: a crash between two of them "
    "sends the answered chunks again (not fixed: see the test's docstring)",
)
def test_a_crash_between_chunks_does_not_ask_the_answered_chunks_again(
    app: Cairn, db_path: Any, clock: Any
) -> None:
    """Killed after the summarizer answered the first chunk of a compaction and
    before the second was sent, the resumed task should not send the first
    chunk's request again: it was answered, and paid for. It does: the whole
    compaction is one entry, recorded when its last chunk is folded, so every
    chunk answered before the crash is asked (and paid) again. A fix records each
    chunk's summary as it arrives (an entry per chunk), which touches how
    compaction replays and how cairn cost reads its entries."""
    import httpx2
    import openai

    from tests.agent_server import API_KEY, resume

    sent = [0]

    def crash_before_the_second(request: httpx2.Request) -> None:
        sent[0] += 1
        if sent[0] == 2:
            raise Crash("killed between two chunks")

    with model_server(Scripted(["Goal: read.\nNext step: more."])) as server:
        http = openai.DefaultHttpxClient(event_hooks={"request": [crash_before_the_second]})
        client = openai.OpenAI(
            base_url=server.base_url, api_key=API_KEY, max_retries=0, http_client=http
        )
        summarizer = LLMSummarizer(client, model="s", max_tokens=100, window=2000)
        with pytest.raises(Crash):
            app.run(_chunked_task(app, summarizer), task_id="b")
        assert server.requests == 1
        with resume(f"sqlite:///{db_path}", clock) as other:
            assert other.run(_chunked_task(other, summarizer), task_id="b")["ok"]
        assert server.requests >= 4
        assert server.repeats == 0


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
    )
    assert all(SUMMARY_HEADER not in str(c) for ctx in contexts.values() for c in ctx)
    assert len(contexts[points[-1]]) == points[-1]  # nothing was ever folded
    # Over 1,000 tokens from about turn 20 on: without the hold, ~20 tries.
    assert 1 <= len(asked) <= 4
