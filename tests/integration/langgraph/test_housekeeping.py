"""delete_for_runs, copy_thread and prune on real graphs, on both stores: what
remains reads back whole through a new saver (a list channel's appends stood
on rows of deleted checkpoints, and every row is compressed against the rows
before it), and the rows of deleted checkpoints are gone."""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage

from cairn.integrations.langgraph import CairnSaver
from tests.integration.langgraph.graphs import echo_graph, say, texts, thread
from tests.integration.langgraph.stored import rows, stored_messages


def turn(graph: object, name: str, text: str, run_id: str) -> None:
    """One turn of thread ``name`` as run ``run_id``, given as the LangGraph
    server gives it: in the config's metadata, which every checkpoint's takes."""
    config = {**thread(name), "metadata": {"run_id": run_id}}
    graph.invoke({"messages": [HumanMessage(text)]}, config)  # type: ignore[attr-defined]


def test_prune_keeps_the_newest_checkpoint_whole(store_url: str) -> None:
    """After six turns, prune(keep_latest) leaves one checkpoint; its messages
    (appends over rows of the deleted checkpoints) read back whole through a new
    saver, every row no kept checkpoint reaches is gone, the thread goes on, and
    another thread is untouched. prune(delete) then deletes the thread."""
    with CairnSaver(store_url) as saver:
        graph = echo_graph(saver)
        for i in range(6):
            say(graph, thread("t"), f"q{i}")
            say(graph, thread("other"), f"o{i}")
        saver.prune(["t"])
        # Left: the newest checkpoint alone (no writes: it ends a turn), with
        # the 12 messages stored once, whole: its appends stood on deleted rows.
        assert rows(saver, "t", "checkpoints") == 1
        assert rows(saver, "t") == 1
        assert stored_messages(saver, "t") == (12, 1)
    with CairnSaver(store_url) as saver:
        graph = echo_graph(saver)
        state = graph.get_state(thread("t"))
        assert texts(state) == [m for i in range(6) for m in (f"q{i}", f"heard q{i} ({2 * i + 1})")]
        assert len(list(graph.get_state_history(thread("t")))) == 1
        assert say(graph, thread("t"), "q6")[-1] == "heard q6 (13)"
        assert len(list(graph.get_state_history(thread("other")))) == 6 * 3
        saver.prune(["t"], strategy="delete")
        assert graph.get_state(thread("t")).values == {}
        assert rows(saver, "t") == 0


def test_delete_for_runs_keeps_the_later_runs_values(store_url: str) -> None:
    """Deleting the checkpoints of the first three runs (a turn each: LangGraph
    takes a repeated run id for the same run resumed) leaves the fourth run's,
    whose messages still include the earlier turns (their rows stay, as the
    fourth run's appends stand on them); deleting it too leaves nothing."""
    with CairnSaver(store_url) as saver:
        graph = echo_graph(saver)
        for i in range(3):
            turn(graph, "t", f"a{i}", f"run-a{i}")
        turn(graph, "t", "b0", "run-b")
        saver.delete_for_runs(["run-a0", "run-a1", "run-a2", "no-such-run"])
        history = list(graph.get_state_history(thread("t")))
        assert {snapshot.metadata["run_id"] for snapshot in history} == {"run-b"}
    with CairnSaver(store_url) as saver:
        state = echo_graph(saver).get_state(thread("t"))
        assert texts(state)[-2:] == ["b0", "heard b0 (7)"]
        assert len(texts(state)) == 8
        saver.delete_for_runs(["run-b"])
        assert rows(saver, "t") == 0


def test_copy_thread_makes_an_independent_copy(store_url: str) -> None:
    """A copied thread has the source's whole history; a turn on the copy
    leaves the source as it was."""
    with CairnSaver(store_url) as saver:
        graph = echo_graph(saver)
        for i in range(3):
            say(graph, thread("source"), f"q{i}")
        saver.copy_thread("source", "copy")
        source = [texts(s) for s in graph.get_state_history(thread("source"))]
        assert [texts(s) for s in graph.get_state_history(thread("copy"))] == source
        assert say(graph, thread("copy"), "q3")[-1] == "heard q3 (7)"
    with CairnSaver(store_url) as saver:
        graph = echo_graph(saver)
        assert [texts(s) for s in graph.get_state_history(thread("source"))] == source
        assert len(texts(graph.get_state(thread("copy")))) == 8


def test_an_unknown_prune_strategy_is_refused(store_url: str) -> None:
    """prune with a strategy it does not know names the ones it does, and
    deletes nothing."""
    with CairnSaver(store_url) as saver:
        graph = echo_graph(saver)
        say(graph, thread("t"), "q0")
        with pytest.raises(ValueError, match="'keep_latest' and 'delete'"):
            saver.prune(["t"], strategy="keep_oldest")
        assert rows(saver, "t", "checkpoints") == 3
