"""CairnSaver under real LangGraph graphs, on both stores: messages kept as
appends, state read back by a new saver, time travel and forks, a message
removed by id, interrupts resumed, the async API."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, RemoveMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import Command, interrupt

from cairn.integrations.langgraph import CairnSaver
from cairn.redaction import REDACTED, register_secret
from cairn.store.sqlite import SQLiteStore
from tests.integration.langgraph.graphs import echo_graph, say, texts, thread
from tests.integration.langgraph.stored import stored_messages


def test_each_message_is_stored_once(store_url: str) -> None:
    """Twenty turns store forty messages once each: one whole row (the first
    turn) and appends, not twenty growing copies of the list."""
    with CairnSaver(store_url) as saver:
        graph = echo_graph(saver)
        for i in range(20):
            messages = say(graph, thread("t"), f"q{i}")
        assert len(messages) == 40
        assert stored_messages(saver, "t") == (40, 1)


def test_a_new_saver_reads_the_thread_and_goes_on(store_url: str) -> None:
    """A saver opened afresh on the same store (a restarted process) reads the
    whole thread and appends the next turn to it."""
    with CairnSaver(store_url) as saver:
        graph = echo_graph(saver)
        for i in range(5):
            say(graph, thread("t"), f"q{i}")
    with CairnSaver(store_url) as saver:
        graph = echo_graph(saver)
        assert len(texts(graph.get_state(thread("t")))) == 10
        messages = say(graph, thread("t"), "q5")
        assert messages[-2:] == ["q5", "heard q5 (11)"]
        assert stored_messages(saver, "t") == (12, 1)


def test_time_travel_and_a_fork(store_url: str) -> None:
    """get_state_history lists every checkpoint newest first with the messages it
    had; a turn run from an old checkpoint forks the thread, and both branches
    keep their own messages."""
    with CairnSaver(store_url) as saver:
        graph = echo_graph(saver)
        for i in range(3):
            say(graph, thread("t"), f"q{i}")
        history = list(graph.get_state_history(thread("t")))
        assert [len(texts(s)) for s in history] == [6, 5, 4, 4, 3, 2, 2, 1, 0]
        after_first = next(s for s in history if len(texts(s)) == 2)
        old = after_first.config["configurable"]["checkpoint_id"]
        forked = say(graph, thread("t", old), "other")
        assert forked == ["q0", "heard q0 (1)", "other", "heard other (3)"]
        assert texts(graph.get_state(thread("t"))) == forked
        assert len(texts(graph.get_state(history[0].config))) == 6
        with CairnSaver(store_url) as cold:  # rebuilt from the rows, not the cache
            state = echo_graph(cold).get_state(history[0].config)
            assert texts(state) == texts(history[0])


def test_a_removed_message_is_stored_whole_once(store_url: str) -> None:
    """Removing a message (add_messages by id) makes a value that does not extend
    the last: it is stored whole, and the appends after it build on it."""
    with CairnSaver(store_url) as saver:
        graph = echo_graph(saver)
        say(graph, thread("t"), "q0")
        first = graph.get_state(thread("t")).values["messages"][0]
        graph.update_state(thread("t"), {"messages": [RemoveMessage(id=first.id)]})
        assert texts(graph.get_state(thread("t"))) == ["heard q0 (1)"]
        assert say(graph, thread("t"), "q1") == ["heard q0 (1)", "q1", "heard q1 (2)"]
        _, whole = stored_messages(saver, "t")
        assert whole == 2


def approval_graph(saver: CairnSaver, asked: list[str]) -> Any:
    def ask(state: MessagesState) -> dict[str, Any]:
        asked.append("ask")
        answer = interrupt("approve?")
        return {"messages": [HumanMessage(f"answer: {answer}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    return builder.compile(checkpointer=saver)


def test_an_interrupt_resumes_from_a_new_saver(store_url: str) -> None:
    """A graph interrupted for approval is resumed by another saver on the store:
    the pending interrupt was stored as a write, and the answer lands once."""
    asked: list[str] = []
    with CairnSaver(store_url) as saver:
        graph = approval_graph(saver, asked)
        graph.invoke({"messages": [HumanMessage("start")]}, thread("t"))
        assert graph.get_state(thread("t")).interrupts[0].value == "approve?"
    with CairnSaver(store_url) as saver:
        graph = approval_graph(saver, asked)
        state = graph.invoke(Command(resume="yes"), thread("t"))
        assert [m.content for m in state["messages"]] == ["start", "answer: yes"]
        assert not graph.get_state(thread("t")).interrupts


def test_the_async_api_runs_a_graph(store_url: str) -> None:
    """ainvoke, aget_state and aget_state_history work through the async methods."""

    async def run() -> tuple[list[str], int]:
        with CairnSaver(store_url) as saver:
            graph = echo_graph(saver)
            for i in range(3):
                await graph.ainvoke({"messages": [HumanMessage(f"q{i}")]}, thread("t"))
            state = await graph.aget_state(thread("t"))
            history = [s async for s in graph.aget_state_history(thread("t"))]
            return texts(state), len(history)

    messages, checkpoints = asyncio.run(run())
    assert messages[-1] == "heard q2 (5)"
    assert checkpoints == 9


def test_threads_and_delete(store_url: str) -> None:
    """Two threads keep apart; delete_thread removes one and leaves the other."""
    with CairnSaver(store_url) as saver:
        graph = echo_graph(saver)
        say(graph, thread("a"), "for a")
        say(graph, thread("b"), "for b")
        saver.delete_thread("a")
        assert texts(graph.get_state(thread("a"))) == []
        assert texts(graph.get_state(thread("b"))) == ["for b", "heard for b (1)"]
        assert say(graph, thread("a"), "again") == ["again", "heard again (1)"]


def test_a_long_thread_on_sqlite_keeps_one_connection(tmp_path: Path) -> None:
    """LangGraph calls the saver from a new executor thread every run; the saver
    runs its statements on one thread of its own, so thirty turns open one
    connection (beside the opening thread's), not one per run, and closing the
    saver releases it."""
    store = SQLiteStore(tmp_path / "lg.db")
    try:
        saver = CairnSaver(store)
        graph = echo_graph(saver)
        for i in range(30):
            say(graph, thread("t"), f"q{i}")
        assert len(store._all) == 2
        saver.close()
        assert len(store._all) == 1
    finally:
        store.close()


def test_a_node_error_is_kept_without_the_secret_it_quotes(store_url: str) -> None:
    """A node fails with an error quoting the model client's key and a credential
    field: LangGraph keeps the error as a pending write, and what the saver
    stored (read back through the saver, past any compression) is the error's
    type with the secrets redacted."""
    key = "lg-node-secret-7f3a9c0d21"
    register_secret(key)

    def boom(state: MessagesState) -> dict[str, Any]:
        raise PermissionError(f"Error code: 401 - key {key}, {{'api_key': 'zz-unknown-99887766'}}")

    def fine(state: MessagesState) -> dict[str, Any]:
        return {"messages": []}

    saver = CairnSaver(store_url)
    builder = StateGraph(MessagesState)
    builder.add_node("boom", boom)
    builder.add_node("fine", fine)
    builder.add_edge(START, "boom")
    builder.add_edge(START, "fine")
    graph = builder.compile(checkpointer=saver)
    with pytest.raises(PermissionError):
        graph.invoke({"messages": [HumanMessage("hi")]}, thread("t"))
    stored = saver.get_tuple(thread("t"))
    saver.close()
    assert stored is not None
    assert stored.pending_writes is not None
    errors = [value for _, channel, value in stored.pending_writes if channel == "__error__"]
    assert len(errors) == 1
    text = str(errors[0])
    assert "PermissionError" in text
    assert key not in text
    assert "zz-unknown-99887766" not in text
    assert REDACTED in text
