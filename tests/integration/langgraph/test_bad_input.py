"""What CairnSaver refuses, and that refusing loses nothing: names no store can
hold, a checkpoint format it does not know (given, or found stored), tables of
a newer cairn, and a store that is not cairn's."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import empty_checkpoint

from cairn.errors import InvalidName, NotACairnStore
from cairn.integrations.langgraph import CairnSaver, CheckpointFormatError
from cairn.store import open_store
from tests.integration.langgraph.graphs import echo_graph, say, texts, thread

BAD_THREADS = [
    pytest.param("bad\ud800thread", "lone surrogate", id="surrogate"),
    pytest.param("bad\x00thread", "NUL", id="nul"),
    pytest.param("t" * 1001, "bytes long", id="too-long"),
    pytest.param("   ", "empty or blank", id="blank"),
]


COUNTS = (
    "SELECT count(*) FROM cairn_lg_checkpoints",
    "SELECT count(*) FROM cairn_lg_blobs",
    "SELECT count(*) FROM cairn_lg_writes",
)


def rows(saver: CairnSaver) -> int:
    """Rows in the checkpointer's tables."""
    return stored_rows(saver.store)


def stored_rows(store: Any) -> int:
    return sum(int(store._exec(statement).rows[0][0]) for statement in COUNTS)


@pytest.mark.parametrize(("thread_id", "said"), BAD_THREADS)
def test_a_thread_id_no_store_can_hold_is_refused(
    store_url: str, thread_id: str, said: str
) -> None:
    """A thread id with a lone surrogate, a NUL, over 1,000 bytes or blank is
    refused with InvalidName saying what is wrong, before anything is written;
    the thread before it is intact."""
    with CairnSaver(store_url) as saver:
        graph = echo_graph(saver)
        say(graph, thread("good"), "hello")
        before = rows(saver)
        with pytest.raises(InvalidName, match=said) as caught:
            graph.invoke({"messages": [HumanMessage("x")]}, thread(thread_id))
        assert "Nothing was written" in str(caught.value)
        assert rows(saver) == before
        assert texts(graph.get_state(thread("good"))) == ["hello", "heard hello (1)"]


def test_a_namespace_no_store_can_hold_is_refused(store_url: str) -> None:
    """A checkpoint namespace with a NUL is refused the same way, reading or writing."""
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": "a\x00b"}}
    with CairnSaver(store_url) as saver:
        with pytest.raises(InvalidName, match="checkpoint_ns"):
            saver.put(config, empty_checkpoint(), {}, {})
        with pytest.raises(InvalidName, match="checkpoint_ns"):
            saver.get_tuple(config)
        assert rows(saver) == 0


def test_a_config_without_thread_says_how_to_give_one(store_url: str) -> None:
    """No thread_id in the config: the error shows the config to pass."""
    with CairnSaver(store_url) as saver, pytest.raises(InvalidName, match="thread_id"):
        saver.get_tuple({"configurable": {}})


def test_a_checkpoint_of_a_newer_format_is_refused(store_url: str) -> None:
    """A checkpoint whose v this cairn does not know (a newer LangGraph's) is
    refused with CheckpointFormatError naming the versions it knows; nothing is
    written."""
    checkpoint: Any = {**empty_checkpoint(), "v": 99}
    with CairnSaver(store_url) as saver:
        with pytest.raises(CheckpointFormatError, match=r"v=99.*knows v=1, 2, 3, 4"):
            saver.put(thread("t"), checkpoint, {}, {})
        assert rows(saver) == 0
        assert saver.get_tuple(thread("t")) is None


def test_a_stored_checkpoint_of_a_newer_format_is_refused_and_kept(store_url: str) -> None:
    """A stored checkpoint in an unknown format (written by a newer cairn) is
    refused on reading, and stays stored, unchanged."""
    with CairnSaver(store_url) as saver:
        say(echo_graph(saver), thread("t"), "hello")
        newer = {**empty_checkpoint(), "v": 99}
        kind, data = saver.serde.dumps_typed(newer)
        saver.store._exec(
            "UPDATE cairn_lg_checkpoints SET type = ?, checkpoint = ? WHERE thread_id = ?",
            (kind, data, "t"),
        )
        before = rows(saver)
        with pytest.raises(CheckpointFormatError, match="v=99"):
            saver.get_tuple(thread("t"))
        assert rows(saver) == before


def test_a_value_with_an_unknown_tag_is_refused(store_url: str) -> None:
    """A stored value tagged with a compression or serializer this cairn does not
    know is refused, naming the tag, not decoded as garbage."""
    with CairnSaver(store_url) as saver:
        say(echo_graph(saver), thread("t"), "hello")
        saver.store._exec("UPDATE cairn_lg_blobs SET type = ? WHERE thread_id = ?", ("z9+x", "t"))
    with CairnSaver(store_url) as fresh, pytest.raises(CheckpointFormatError, match="'z9\\+x'"):
        fresh.get_tuple(thread("t"))


def test_tables_of_a_newer_cairn_are_refused(store_url: str) -> None:
    """LangGraph tables in a newer format than this cairn's: opening refuses, and
    the thread stored there is left as it was."""
    with CairnSaver(store_url) as saver:
        say(echo_graph(saver), thread("t"), "hello")
        saver.store._exec("UPDATE cairn_lg_meta SET value = ? WHERE key = ?", ("99", "format"))
        before = rows(saver)
    with pytest.raises(CheckpointFormatError, match="format 99"):
        CairnSaver(store_url)
    store = open_store(store_url)
    try:
        assert stored_rows(store) == before
    finally:
        store.close()


def test_an_object_that_is_not_a_store_is_refused(tmp_path: Path) -> None:
    """A sqlite3 connection (as LangGraph's SqliteSaver takes) is not a cairn
    store: the error says what to pass instead."""
    conn = sqlite3.connect(tmp_path / "x.db")
    try:
        with pytest.raises(NotACairnStore, match=r"sqlite3\.Connection.*store URL"):
            CairnSaver(conn)  # type: ignore[arg-type]
    finally:
        conn.close()


def test_a_langgraph_sqlite_file_is_refused_unchanged(tmp_path: Path) -> None:
    """A file LangGraph's own SqliteSaver wrote is not a cairn store: CairnSaver
    refuses it and leaves it byte for byte as it was."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = tmp_path / "langgraph.db"
    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    conn.close()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(NotACairnStore, match="not changed"):
        CairnSaver(f"sqlite:///{path}")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
