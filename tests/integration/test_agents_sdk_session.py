"""CairnSession: the Agents SDK's Session on a cairn conversation, on every backend.

On its own (``store=``) it is a task of its own in the store; inside a task
(``ctx=``) a conversation of that task. Either way it is append-only: what is
added comes back exactly, a pop or a clear is one more row, compaction folds
the head into a summary and keeps it in the archive.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agents import Agent, Runner

from cairn import Cairn, Context
from cairn.agent import ExtractiveSummarizer, LLMSummarizer, iter_history
from cairn.agent.costs import cost_report
from cairn.agent.simulate import SimulatedModelServer
from cairn.agent.summarize import SUMMARY_HEADER
from cairn.integrations.openai_agents import SESSION_TASK, CairnSession
from cairn.store import open_store
from tests.agent_server import Scripted, openai_client
from tests.agents_sdk import ITEMS, MODEL, sdk_model


def test_items_come_back_as_added_and_outlive_the_session_object(store_url: str) -> None:
    """Every kind of item the SDK saves comes back exactly as added, from this
    session object and from a new one on the same store and id; the session is
    a task of its own, named as documented."""

    async def scenario() -> None:
        first = CairnSession("chat-1", store=store_url)
        await first.add_items(ITEMS[:2])
        await first.add_items(ITEMS[2:])
        assert await first.get_items() == ITEMS
        assert await first.get_items(limit=2) == ITEMS[-2:]
        first.close()
        async with CairnSession("chat-1", store=store_url) as again:
            assert await again.get_items() == ITEMS
        with CairnSession("chat-2", store=store_url) as other:
            assert await other.get_items() == []

    asyncio.run(scenario())
    store = open_store(store_url)
    try:
        task = store.get_task("chat-1")
        assert task is not None
        assert (task.name, task.status) == (SESSION_TASK, "pending")
        rows = list(iter_history(store, "chat-1", "session"))
    finally:
        store.close()
    # The two function calls of one add share a row (an assistant message with tool_calls).
    roles = [r.message["role"] for r in rows]
    assert roles == ["user", "assistant", "assistant", "tool", "tool", "assistant"]
    assert [c["id"] for c in rows[2].message["tool_calls"]] == ["c1", "c2"]


def test_pop_and_clear_append_rows_and_lose_nothing(store_url: str) -> None:
    """pop_item returns the latest item and later reads lack it; clear_session
    empties what is read; every row stays in the archive, none is rewritten."""

    async def scenario() -> None:
        session = CairnSession("chat", store=store_url)
        assert await session.pop_item() is None
        await session.add_items(ITEMS)
        assert await session.pop_item() == ITEMS[-1]
        assert await session.pop_item() == ITEMS[-2]
        assert await session.get_items() == ITEMS[:-2]
        await session.clear_session()
        assert await session.get_items() == []
        await session.add_items([{"role": "user", "content": "again"}])
        reopened = CairnSession("chat", store=store_url)
        assert await reopened.get_items() == [{"role": "user", "content": "again"}]
        session.close()
        reopened.close()

    asyncio.run(scenario())
    store = open_store(store_url)
    try:
        rows = list(iter_history(store, "chat", "session"))
    finally:
        store.close()
    kinds = [(r.kind, r.message["role"]) for r in rows]
    # 6 rows of items, 2 pop markers, the clearing summary, the new item.
    assert len(rows) == 10
    assert kinds[6:] == [
        ("message", "developer"),
        ("message", "developer"),
        ("summary", "user"),
        ("message", "user"),
    ]


def _turn(n: int) -> list[Any]:
    return [
        {"role": "user", "content": f"question {n}: " + "what about the numbers? " * 8},
        {
            "id": f"msg_{n}",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": f"answer {n}: " + "it sold well. " * 12}],
        },
    ]


def test_a_long_session_is_compacted_and_its_head_archived(store_url: str) -> None:
    """Past its threshold the session folds its head into a summary: reads give
    the summary (a user message) and the recent items only, while the archive
    keeps every item ever added."""

    async def scenario() -> list[Any]:
        session = CairnSession(
            "long",
            store=store_url,
            threshold=600,
            keep_tail=200,
            summarizer=ExtractiveSummarizer(max_tokens=120),
        )
        for n in range(12):
            await session.add_items(_turn(n))
        items = await session.get_items()
        session.close()
        return items

    items = asyncio.run(scenario())
    assert items[0]["role"] == "user"
    assert items[0]["content"].startswith(SUMMARY_HEADER)
    assert items[-2:] == _turn(11)
    assert len(items) < 24
    store = open_store(store_url)
    try:
        rows = list(iter_history(store, "long", "session"))
    finally:
        store.close()
    messages = [r.message for r in rows if r.kind == "message"]
    assert messages == [item for n in range(12) for item in _turn(n)]
    assert sum(1 for r in rows if r.kind == "summary") >= 2


def test_a_summarizer_model_is_counted_in_the_cost(store_url: str) -> None:
    """A session compacted by a model: the summarizer's request is recorded with
    its usage, and ``cairn cost`` counts it."""
    with SimulatedModelServer(Scripted(["Goal: numbers. Decisions: none."])) as server:

        async def scenario() -> None:
            summarizer = LLMSummarizer(openai_client(server), model=MODEL)
            session = CairnSession(
                "priced", store=store_url, threshold=600, keep_tail=200, summarizer=summarizer
            )
            for n in range(6):
                await session.add_items(_turn(n))
            session.close()

        asyncio.run(scenario())
        requests = server.requests
    assert requests >= 1
    store = open_store(store_url)
    try:
        report = cost_report(store)
    finally:
        store.close()
    assert report.total.compactions == requests
    assert report.total.usage.input_tokens > 0
    assert report.total.cost > 0


def test_the_plain_runner_remembers_earlier_turns_through_it(store_url: str) -> None:
    """Used with Runner.run outside any task, the session carries the first
    run's exchange into the second run's request."""
    with SimulatedModelServer(Scripted(["Hello, Ada.", "You are Ada."])) as server:
        agent = Agent(name="greeter", instructions="Be brief.", model=sdk_model(server))

        async def scenario() -> str:
            session = CairnSession("ada", store=store_url)
            await Runner.run(agent, "My name is Ada.", session=session)
            result = await Runner.run(agent, "Who am I?", session=session)
            session.close()
            return str(result.final_output)

        assert asyncio.run(scenario()) == "You are Ada."
        second = server.bodies[-1]["messages"]
    texts = [m.get("content") for m in second]
    assert "My name is Ada." in texts
    assert "Hello, Ada." in str(texts)
    assert texts[-1] == "Who am I?"


def test_inside_a_task_it_is_a_conversation_of_the_task(store_url: str, tmp_path: Path) -> None:
    """CairnSession(name, ctx=ctx) writes conversation ``name`` of the running
    task; the task's result sees what it wrote, and ``cairn conversation`` can
    read it like any other."""
    app = Cairn(store_url)

    @app.task
    async def chat(ctx: Context) -> list[Any]:
        session = CairnSession("notes", ctx=ctx)
        await session.add_items(ITEMS)
        await session.pop_item()
        return await session.get_items()

    with app:
        assert app.run(chat, task_id="chat-task") == ITEMS[:-1]
        rows = list(iter_history(app.store, "chat-task", "notes"))
    assert len(rows) == 7  # six rows of items and the pop marker


def test_a_session_whose_summaries_always_fail_stays_under_its_bound(store_url: str) -> None:
    """A summarizer that always fails: past the session's max_context the
    extractive fallback folds the head, so what get_items returns stays under
    the bound, and the archive still keeps every item."""
    from cairn.agent.tokens import DEFAULT_COUNTER, count_messages

    def failing(request: Any) -> str:
        raise RuntimeError("summarizer down")

    async def scenario() -> tuple[list[Any], int]:
        session = CairnSession(
            "bounded",
            store=store_url,
            threshold=300,
            keep_tail=100,
            summarizer=failing,
            max_context=500,
        )
        largest = 0
        for n in range(30):
            await session.add_items(_turn(n))
            items = await session.get_items()
            largest = max(largest, count_messages(items, DEFAULT_COUNTER))
        session.close()
        return items, largest

    items, largest = asyncio.run(scenario())
    assert largest <= 500
    assert items[0]["content"].startswith(SUMMARY_HEADER)
    store = open_store(store_url)
    try:
        rows = list(iter_history(store, "bounded", "session"))
    finally:
        store.close()
    assert [r.message for r in rows if r.kind == "message"] == [
        item for n in range(30) for item in _turn(n)
    ]
    assert all((r.meta or {}).get("fallback") == "extractive" for r in rows if r.kind == "summary")
