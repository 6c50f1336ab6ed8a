"""Recorded model calls through the real SDKs, and token counting.

``ctx.llm`` and ``ctx.llm_call`` go through the official openai and anthropic
SDKs to the fake server of ``tests/agent_server.py`` on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from cairn import Cairn, Context, TaskFailed
from cairn.agent import (
    DEFAULT_PRICES,
    EstimateCounter,
    Price,
    PriceTable,
    Reply,
    Usage,
    count_message,
    user,
)
from cairn.agent.tokens import TokenCounter
from cairn.blobs import is_ref
from cairn.clock import FakeClock
from cairn.testing import set_fault_hook
from tests.agent_server import (
    API_KEY,
    READ_TOOL,
    Crash,
    DocReader,
    Scripted,
    anthropic_client,
    crash_at,
    model_server,
    openai_client,
    resume,
)

TOOL_CALL = {
    "role": "assistant",
    "content": "Let me look.",
    "tool_calls": [
        {
            "id": "toolu_1",
            "type": "function",
            "function": {"name": "read_document", "arguments": '{"name": "doc-01"}'},
        }
    ],
}


def test_llm_call_records_usage_and_cost_and_replays_without_a_request(app: Cairn) -> None:
    """ctx.llm_call sends one request and records the reply with its usage and its
    cost from the price table; run again (the task retried after a failure), it
    returns the same reply and sends nothing."""
    fail = [True]
    with model_server(Scripted(["Paris."])) as server:
        client = openai_client(server)
        prices = PriceTable({"tiny": Price(input=1.0, output=2.0)})

        @app.task(name="ask")
        def ask(ctx: Context) -> dict[str, Any]:
            reply = ctx.llm_call(
                [user("Capital of France?")], model="tiny", client=client, prices=prices
            )
            if fail[0]:
                fail[0] = False
                raise RuntimeError("fail after the call, so the retry replays it")
            return {"content": reply.content, "usage": reply.usage.to_dict(), "cost": reply.cost}

        result = app.run(ask, task_id="a")
        assert server.requests == 1
    usage = result["usage"]
    assert result["content"] == "Paris."
    assert usage["input_tokens"] > 0
    assert usage["output_tokens"] > 0
    assert not usage["estimated"]
    expected = (usage["input_tokens"] * 1.0 + usage["output_tokens"] * 2.0) / 1e6
    assert result["cost"] == pytest.approx(expected)


def test_no_key_or_header_reaches_the_store(app: Cairn, tmp_path: Path) -> None:
    """After calls that succeed and a call the server refuses, the store's files
    hold neither the API key nor an Authorization header."""
    with model_server(DocReader(2)) as server:
        client = openai_client(server)

        @app.task(name="agent", retry=None)
        def agent(ctx: Context) -> str:
            conv = ctx.conversation("main", system="Read.", client=client)
            conv.append(user("go"))
            ctx.llm(conv, model="gpt-4o-mini", tools=[READ_TOOL])
            server.fail_next(1, 401)
            ctx.llm_call([user("again")], model="gpt-4o-mini", client=client)
            return "unreachable"

        with pytest.raises(TaskFailed, match="AuthenticationError"):
            app.run(agent, task_id="k")
    app.close()
    for path in tmp_path.glob("cairn.db*"):
        data = path.read_bytes()
        assert API_KEY.encode() not in data, path
        assert b"Bearer" not in data, path
        assert b"Authorization" not in data, path


def test_anthropic_sdk_calls_are_recorded_in_the_openai_shape(app: Cairn) -> None:
    """Through the anthropic SDK, a reply with a tool call comes back (and is
    stored) in the OpenAI chat shape, with usage counting cache reads as input."""
    with model_server(Scripted([TOOL_CALL, "Done."])) as server:
        server.cached_tokens = 5
        client = anthropic_client(server)

        @app.task(name="agent")
        def agent(ctx: Context) -> list[Any]:
            conv = ctx.conversation("main", system="You read.", client=client)
            conv.append(user("read doc-01"))
            first = ctx.llm(conv, model="claude-sonnet-4-20250514", tools=[READ_TOOL])
            call = first.tool_calls[0]
            conv.append({"role": "tool", "tool_call_id": call.id, "content": "doc-01 says hi"})
            second = ctx.llm(conv, model="claude-sonnet-4-20250514", tools=[READ_TOOL])
            return [call.name, call.args, second.content, first.usage.to_dict(), first.cost]

        name, args, text, usage, cost = app.run(agent, task_id="a")
        sent = server.bodies[1]
    assert (name, args, text) == ("read_document", {"name": "doc-01"}, "Done.")
    assert usage["cached_tokens"] == 5
    assert cost is not None
    assert sent["system"] == "You read."
    assert sent["messages"][1]["content"][-1]["type"] == "tool_use"
    assert sent["messages"][2]["content"][0]["type"] == "tool_result"
    rows = app.store.load_messages("a", "main", 0, 10)
    assert json.loads(rows[2].content)["tool_calls"][0]["function"]["name"] == "read_document"


def test_async_tasks_await_ctx_llm_and_replay_it(app: Cairn) -> None:
    """In an async task with the async openai client, ``await ctx.llm(conv)``
    works, and a retried attempt replays the recorded reply without a request."""
    fail = [True]
    with model_server(DocReader(3)) as server:
        client = openai_client(server, is_async=True)

        @app.task(name="agent")
        async def agent(ctx: Context) -> list[str]:
            conv = ctx.conversation("main", system="Read.", client=client)
            conv.append(user("go"))
            reply: Reply = await ctx.llm(conv, model="gpt-4o-mini", tools=[READ_TOOL])
            if fail[0]:
                fail[0] = False
                raise RuntimeError("fail once after the call")
            await asyncio.sleep(0)  # real-sleep-ok: a zero yield to the event loop; no time passes
            return [c.name for c in reply.tool_calls]

        assert app.run(agent, task_id="a") == ["read_document"]
        assert server.requests == 1


def test_the_estimator_is_sane_for_english_and_cjk() -> None:
    """English runs at about 4 characters a token; Japanese and Chinese at about
    one token a character, several times more tokens per character than English;
    mixed text adds up; tool calls and framing count."""
    counter = EstimateCounter()
    english = "The quarterly report shows revenue grew by twelve percent. " * 10
    japanese = "東京は日本の首都であり、世界で最も人口の多い都市圏の一つです。" * 10
    chinese = "北京是中华人民共和国的首都\uff0c也是全国的政治和文化中心。" * 10
    assert len(english) / 5 < counter.count(english) < len(english) / 3
    assert 0.7 * len(japanese) <= counter.count(japanese) <= 1.3 * len(japanese)
    assert 0.7 * len(chinese) <= counter.count(chinese) <= 1.3 * len(chinese)
    per_char_en = counter.count(english) / len(english)
    assert counter.count(japanese) / len(japanese) > 3 * per_char_en
    assert counter.count("東京 Tokyo") == counter.count("東京") + counter.count(" Tokyo")
    assert counter.count("Привет, мир") > counter.count("Hello, wrld")
    call = {"role": "assistant", "content": None, "tool_calls": TOOL_CALL["tool_calls"]}
    assert count_message(call) > count_message({"role": "assistant", "content": ""})


def test_a_custom_counter_drives_compaction(app: Cairn) -> None:
    """A TokenCounter plugged into a conversation is what its token counts and its
    compaction decisions use."""

    class EveryCharacter:
        def count(self, text: str) -> int:
            return len(text)

    assert isinstance(EveryCharacter(), TokenCounter)

    @app.task(name="talk")
    def talk(ctx: Context) -> tuple[int, bool]:
        conv = ctx.conversation("main", threshold=300, keep_tail=100, counter=EveryCharacter())
        conv.append(user("x" * 200))
        conv.append(user("y" * 200))
        return conv.tokens, conv.compact() is not None

    assert app.run(talk, task_id="t") == (408, True)


def test_prices_match_dated_model_names_and_can_be_overridden() -> None:
    """A dated model name finds its family's price (the longest prefix), an unknown
    model has no cost, and a table with overrides replaces only what it names."""
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000, cached_tokens=500_000)
    assert DEFAULT_PRICES.cost("gpt-4o-mini-2024-07-18", usage) == pytest.approx(
        0.5 * 0.15 + 0.5 * 0.075 + 0.60
    )
    assert DEFAULT_PRICES.cost("gpt-4o-2024-08-06", usage) == pytest.approx(
        0.5 * 2.5 + 0.5 * 1.25 + 10.0
    )
    assert DEFAULT_PRICES.cost("my-local-llama", usage) is None
    mine = DEFAULT_PRICES.with_prices({"my-local-llama": Price(0.0, 0.0)})
    assert mine.cost("my-local-llama", usage) == 0.0
    assert mine.cost("gpt-4o", usage) == DEFAULT_PRICES.cost("gpt-4o", usage)


def test_the_llm_summarizer_asks_for_the_sections_and_its_cost_is_recorded(app: Cairn) -> None:
    """LLMSummarizer sends the previous summary and the folded messages with a
    prompt asking for goal, decisions and why, open items, artifacts and next step
    within a word bound; its answer becomes the summary, and its usage and cost
    are recorded with the compaction."""
    from cairn.agent import LLMSummarizer

    summary = (
        "Goal: test.\nDecisions:\n- none\nOpen items:\n- none\nArtifacts:\n- none\nNext step: go"
    )
    with model_server(Scripted([summary])) as server:
        summarizer = LLMSummarizer(openai_client(server), model="gpt-4o-mini", max_words=120)

        @app.task(name="talk")
        def talk(ctx: Context) -> str | None:
            conv = ctx.conversation("main", threshold=60, keep_tail=20, summarizer=summarizer)
            for i in range(8):
                conv.append(user(f"step {i}: wrote report-{i}.md because it was asked"))
            conv.compact()
            return conv.summary

        assert app.run(talk, task_id="t") == summary
        (sent,) = server.bodies
    prompt = sent["messages"][0]["content"]
    sections = ("Goal:", "Decisions:", "Open items:", "Artifacts:", "Next step:", "120 words")
    for section in sections:
        assert section in prompt
    assert "Previous summary:\n(none yet)" in sent["messages"][1]["content"]
    assert "report-0.md" in sent["messages"][1]["content"]
    history = app.store.load_history("t")
    (entry,) = [json.loads(s.output or "{}") for s in history.values() if s.kind == "conv"]
    assert entry["ok"]
    assert entry["usage"]["input_tokens"] > 0
    assert entry["cost"] > 0


def test_an_async_summarizer_is_awaited_in_an_async_task(app: Cairn) -> None:
    """With an ``async def`` summarizer, ``await conv.compact()`` folds the head,
    and the summary replaces it in the active context."""

    async def summarize(request: Any) -> str:
        await asyncio.sleep(0)  # real-sleep-ok: a zero yield to the event loop; no time passes
        return f"{len(request.messages)} messages folded"

    @app.task(name="talk")
    async def talk(ctx: Context) -> tuple[str | None, int]:
        conv = ctx.conversation("main", threshold=60, keep_tail=20, summarizer=summarize)
        for i in range(8):
            conv.append(user(f"message {i} with a few words"))
        await conv.compact()
        return conv.summary, len(conv.messages)

    summary, active = app.run(talk, task_id="t")
    assert summary is not None
    assert summary.endswith("messages folded")
    assert active < 8


HALF = "\ud83d"  # the first half of a UTF-16 pair, alone: not valid Unicode text


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_reply_holding_a_lone_surrogate_is_recorded_not_paid_for_again(
    app: Cairn, api: str, stream: bool
) -> None:
    """The model's reply holds a lone surrogate (JSON may escape one, "\\ud83d",
    and the SDKs decode it as it is), in its text and in a tool call's
    arguments: no store can write such text, and before, the call failed the
    task after it was paid for (and again on every retry). The reply is
    recorded with U+FFFD in its place, as a UTF-8 decoder would put it: one
    request, the task goes on, and a replay returns the same reply."""
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "read_document", "arguments": f'{{"name": "doc {HALF}"}}'},
    }
    reply = {"role": "assistant", "content": f"Broken {HALF} emoji.", "tool_calls": [call]}
    fail = [True]
    with model_server(Scripted([reply])) as server:
        client = openai_client(server) if api == "openai" else anthropic_client(server)

        @app.task(name="agent")
        def agent(ctx: Context) -> list[Any]:
            conv = ctx.conversation("main", client=client)
            conv.append(user("read it"))
            answer = ctx.llm(conv, model="gpt-4o-mini", tools=[READ_TOOL], stream=stream)
            if fail[0]:
                fail[0] = False
                raise RuntimeError("fail once after the call, so the retry replays it")
            return [answer.content, answer.tool_calls[0].args]

        content, args = app.run(agent, task_id="a")
        assert server.requests == 1
    assert content == "Broken \ufffd emoji."
    assert args == {"name": "doc \ufffd"}


def test_a_ten_megabyte_reply_is_stored_once_and_not_asked_again(
    app: Cairn, db_path: Path, clock: FakeClock
) -> None:
    """A 10 MB reply goes to the blob store beside the SQLite file (its row holds
    the reference); killed right after that call is recorded, the resumed task
    reads it back whole from there, sends only the next request, and the two
    processes sent two requests in all, none twice."""
    big = "word " * 2_000_000

    def define(target: Cairn) -> Any:
        @target.task(name="agent")
        def agent(ctx: Context) -> list[Any]:
            conv = ctx.conversation("main", client=client, threshold=10**8, keep_tail=1000)
            conv.append(user("Write it all."))
            first = ctx.llm(conv, model="gpt-4o-mini")
            conv.append(user("Now sum it up."))
            second = ctx.llm(conv, model="gpt-4o-mini")
            return [first.content == big, second.content]

        return agent

    with model_server(Scripted([big, "Done."])) as server:
        client = openai_client(server)
        set_fault_hook(app, crash_at("after_llm", 1))
        with pytest.raises(Crash):
            app.run(define(app), task_id="a")
        with resume(f"sqlite:///{db_path}", clock) as other:
            assert other.run(define(other), task_id="a") == [True, "Done."]
            (row,) = other.store.load_messages("a", "main", 1, 1)
        assert (server.requests, server.repeats) == (2, 0)
    assert is_ref(row.content)
    assert len(server.bodies[1]["messages"][1]["content"]) == len(big)
