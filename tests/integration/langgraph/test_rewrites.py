"""Rows depend on the rows before them (their bytes are compressed against
them, their lists append to them), on both stores: deleting rows in the middle
of a thread, copying into a thread that has rows, and two savers (two
processes, each with its own memory of the thread) writing and pruning one
thread, never leave a row that a new saver cannot read."""

from __future__ import annotations

import threading
from typing import Any

from langchain_core.messages import HumanMessage

from cairn.integrations.langgraph import CairnSaver
from tests.integration.langgraph.graphs import echo_graph, say, texts, thread
from tests.integration.langgraph.test_rows import noise


def history(saver: CairnSaver, name: str) -> list[tuple[Any, ...]]:
    """Every checkpoint of a thread as LangGraph reads it, newest first."""
    config: Any = {"configurable": {"thread_id": name}}
    return [
        (t.checkpoint["id"], t.checkpoint["channel_values"], t.metadata, t.pending_writes)
        for t in saver.list(config)
    ]


def run(graph: Any, name: str, text: str, run_id: str) -> None:
    config = {**thread(name), "metadata": {"run_id": run_id}}
    graph.invoke({"messages": [HumanMessage(text)]}, config)


def test_deleting_a_run_in_the_middle_keeps_the_rest_readable(store_url: str) -> None:
    """Twelve turns, a run each; deleting the checkpoints and writes of runs 4 to
    6 leaves every other checkpoint reading, through a new saver, exactly as
    before: the rows after those runs were compressed against their rows, and
    the later turns' messages appended to their messages."""
    doomed = ["run-3", "run-4", "run-5"]
    with CairnSaver(store_url) as saver:
        graph = echo_graph(saver)
        for i in range(12):
            run(graph, "t", noise(300, i), f"run-{i}")
        before = history(saver, "t")
        saver.delete_for_runs(doomed)
    kept = [entry for entry in before if entry[2]["run_id"] not in doomed]
    assert len(kept) == len(before) - 9
    with CairnSaver(store_url) as saver:
        assert history(saver, "t") == kept
        assert len(texts(echo_graph(saver).get_state(thread("t")))) == 24


def test_copying_into_a_thread_with_checkpoints_adds_the_missing(store_url: str) -> None:
    """copy_thread into a thread that has checkpoints of its own keeps those, adds
    the source's (each reading as in the source), and both read back through a
    new saver; the copy goes on from its newest checkpoint."""
    with CairnSaver(store_url) as saver:
        graph = echo_graph(saver)
        for i in range(3):
            say(graph, thread("source"), noise(200, i))
            say(graph, thread("target"), noise(200, 10 + i))
        source, own = history(saver, "source"), history(saver, "target")
        saver.copy_thread("source", "target")
    with CairnSaver(store_url) as saver:
        merged = history(saver, "target")
        assert sorted(merged, key=repr) == sorted(source + own, key=repr)
        assert history(saver, "source") == source
        newest = max(source + own, key=lambda entry: entry[0])
        assert say(echo_graph(saver), thread("target"), "on")[:-2] == [
            m.content for m in newest[1]["messages"]
        ]


def test_two_savers_write_and_prune_one_thread_in_turn(store_url: str) -> None:
    """Two savers (each with its own memory of the thread, as two processes)
    take turns on one thread, and one prunes it between turns: each notices
    the other's rows before writing after them, and a third saver reads
    every message once and in order."""
    said: list[str] = []
    with CairnSaver(store_url) as one, CairnSaver(store_url) as two:
        graphs = [echo_graph(one), echo_graph(two)]
        for i in range(8):
            text = noise(150, i)
            say(graphs[i % 2], thread("t"), text)
            said += [text, f"heard {text} ({2 * i + 1})"]
            if i == 4:
                two.prune(["t"])
    with CairnSaver(store_url) as third:
        assert texts(echo_graph(third).get_state(thread("t"))) == said


def test_pruning_while_another_saver_writes(store_url: str) -> None:
    """One saver runs turns on a thread while another prunes it over and over, at
    the same time (on PostgreSQL the two really overlap): every turn's messages
    survive, and a new saver reads them all."""
    turns, stop = 12, threading.Event()
    errors: list[BaseException] = []

    def prune() -> None:
        with CairnSaver(store_url) as pruner:
            while not stop.is_set():
                try:
                    pruner.prune(["t"])
                except BaseException as exc:  # noqa: BLE001 - reported below
                    errors.append(exc)
                    return

    with CairnSaver(store_url) as writer:
        graph = echo_graph(writer)
        say(graph, thread("t"), "first")
        pruning = threading.Thread(target=prune)
        pruning.start()
        try:
            for i in range(turns):
                say(graph, thread("t"), noise(100, i))
        finally:
            stop.set()
            pruning.join()
    assert not errors
    with CairnSaver(store_url) as reader:
        messages = texts(echo_graph(reader).get_state(thread("t")))
        assert len(messages) == 2 * (turns + 1)
        assert messages[-2] == noise(100, turns - 1)
