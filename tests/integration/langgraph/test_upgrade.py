"""Stores written by format 1 (the saver cairn shipped before, frozen in
``format1``) are upgraded to format 3 once, when a saver opens them, in one
transaction; every thread then reads back as format 1 read it."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage, RemoveMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT

from cairn.integrations.langgraph import CairnSaver, CheckpointFormatError
from cairn.store import open_store
from cairn.store.sqlbase import SQLStore
from cairn.store.sqlite import SQLiteStore
from tests.integration.langgraph import format1
from tests.integration.langgraph.graphs import echo_graph, say, texts, thread
from tests.integration.langgraph.stored import all_rows, stored_messages
from tests.integration.langgraph.test_saver import approval_graph

FORMAT1_TABLES = ("cairn_lg_checkpoints", "cairn_lg_blobs", "cairn_lg_writes")


def write_format1(url: str) -> None:
    """Threads of every shape format 1 stores, written by the frozen saver: turns
    (appends), a fork, a removed message (a value stored whole), an interrupt
    (a pending write), writes put by hand (special ones too), a second
    namespace, and a thread pruned as format 1 pruned (older checkpoints and
    their writes deleted, the value rows the newest needs kept)."""
    with format1.CairnSaver(url) as saver:
        graph = echo_graph(saver)  # type: ignore[arg-type]
        for i in range(4):
            say(graph, thread("turns"), f"q{i}")
        history = list(graph.get_state_history(thread("turns")))
        old = history[4].config["configurable"]["checkpoint_id"]
        say(graph, thread("turns", old), "a fork")
        say(graph, thread("removed"), "q0")
        first = graph.get_state(thread("removed")).values["messages"][0]
        graph.update_state(thread("removed"), {"messages": [RemoveMessage(id=first.id)]})
        say(graph, thread("removed"), "q1")
        approval_graph(saver, []).invoke(  # type: ignore[arg-type]
            {"messages": [HumanMessage("start")]}, thread("interrupted")
        )
        put_by_hand(saver)
        for i in range(3):
            say(graph, thread("pruned"), f"p{i}")
        newest = graph.get_state(thread("pruned")).config["configurable"]["checkpoint_id"]
        for table in ("cairn_lg_checkpoints", "cairn_lg_writes"):
            saver.store._exec(
                f"DELETE FROM {table} WHERE thread_id = ? AND checkpoint_id < ?",
                ("pruned", newest),
            )


def put_by_hand(saver: Any) -> None:
    """A thread of two namespaces, with ordinary and special writes."""
    for ns in ("", "child:1"):
        config: Any = {"configurable": {"thread_id": "by-hand", "checkpoint_ns": ns}}
        checkpoint = {**empty_checkpoint(), "channel_versions": {"k": "1"}}
        checkpoint["channel_values"] = {"k": {"nested": [1, 2, ns]}}
        stored = saver.put(config, checkpoint, {"source": "input", "step": -1}, {"k": "1"})
        saver.put_writes(stored, [("a", 1), ("b", "two")], "task-1", "path-1")
        saver.put_writes(stored, [(ERROR, "boom"), (INTERRUPT, {"why": ns})], "task-2", "path-0")


def snapshot(saver: Any) -> list[tuple[Any, ...]]:
    """Every checkpoint of the store as LangGraph reads it, newest first."""
    return [
        (t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes)
        for t in saver.list(None)
    ]


def format_of(url: str) -> tuple[str, set[str]]:
    """The format in cairn_lg_meta, and which format 1 tables are left."""
    store = open_store(url)
    assert isinstance(store, SQLStore)
    try:
        (found,), *_ = store._exec("SELECT value FROM cairn_lg_meta").rows
        catalog = (
            "SELECT name FROM sqlite_master WHERE type = 'table'"
            if isinstance(store, SQLiteStore)
            else "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = current_schema()"
        )
        left = {str(name) for (name,) in store._exec(catalog).rows} & set(FORMAT1_TABLES)
        return str(found), left
    finally:
        store.close()


def test_format1_reads_back_identical(store_url: str) -> None:
    """A format 1 store opened by this saver is upgraded: the meta says 3, the
    format 1 tables are gone, and every checkpoint (values, history, pending
    writes, metadata, parents) lists exactly as the frozen format 1 saver
    listed it; the threads go on."""
    write_format1(store_url)
    with format1.CairnSaver(store_url) as old:
        before = snapshot(old)
        assert len(before) > 20
    with CairnSaver(store_url) as saver:
        assert snapshot(saver) == before
        # The pruned thread's appends stood on versions no checkpoint names any
        # more: its 6 messages are one entry now, stored whole.
        assert stored_messages(saver, "pruned") == (6, 1)
        graph = echo_graph(saver)
        held = len(texts(graph.get_state(thread("turns"))))
        assert say(graph, thread("turns"), "q5")[-1] == f"heard q5 ({held + 1})"
    assert format_of(store_url) == ("3", set())
    with CairnSaver(store_url) as cold:
        assert snapshot(cold)[3:] == before  # the new turn's 3 checkpoints come first
        assert texts(echo_graph(cold).get_state(thread("removed"))) == [
            "heard q0 (1)",
            "q1",
            "heard q1 (2)",
        ]


def test_the_upgrade_runs_once(store_url: str) -> None:
    """Opening the upgraded store again changes nothing: same rows, same format."""
    write_format1(store_url)
    with CairnSaver(store_url) as saver:
        rows = all_rows(saver.store)
        listed = snapshot(saver)
    with CairnSaver(store_url) as again:
        assert all_rows(again.store) == rows
        assert snapshot(again) == listed
    assert format_of(store_url) == ("3", set())


def test_an_upgrade_that_cannot_read_a_row_changes_nothing(store_url: str) -> None:
    """A format 1 checkpoint whose body is tagged by a serializer this saver does
    not know cannot be upgraded: opening refuses, naming the tag, and the store
    is left in format 1, readable by the cairn that wrote it."""
    write_format1(store_url)
    with format1.CairnSaver(store_url) as old:
        old.store._exec(
            "UPDATE cairn_lg_checkpoints SET type = ? WHERE thread_id = ?", ("z9+x", "turns")
        )
        listed = len(list(old.list({"configurable": {"thread_id": "removed"}})))
    with pytest.raises(CheckpointFormatError, match="'z9\\+x'"):
        CairnSaver(store_url)
    assert format_of(store_url) == ("1", set(FORMAT1_TABLES))
    with format1.CairnSaver(store_url) as old:
        assert len(list(old.list({"configurable": {"thread_id": "removed"}}))) == listed
