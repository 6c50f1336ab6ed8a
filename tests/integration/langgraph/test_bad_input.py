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
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from cairn.errors import InvalidName, NotACairnStore
from cairn.integrations.langgraph import CairnSaver, CheckpointFormatError
from cairn.integrations.langgraph import saver as saver_module
from cairn.integrations.langgraph._chain import unsqueeze
from cairn.store import open_store
from tests.integration.langgraph.graphs import echo_graph, say, texts, thread
from tests.integration.langgraph.stored import all_rows

BAD_THREADS = [
    pytest.param("bad\ud800thread", "lone surrogate", id="surrogate"),
    pytest.param("bad\x00thread", "NUL", id="nul"),
    pytest.param("t" * 1001, "bytes long", id="too-long"),
    pytest.param("   ", "empty or blank", id="blank"),
]


def rows(saver: CairnSaver) -> int:
    """Rows in the checkpointer's tables."""
    return all_rows(saver.store)


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


def test_a_stored_checkpoint_of_a_newer_format_is_refused_and_kept(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stored checkpoint in an unknown format (written by a newer cairn) is
    refused on reading, and stays stored, unchanged."""
    with CairnSaver(store_url) as saver:
        say(echo_graph(saver), thread("t"), "hello")
        monkeypatch.setattr(saver_module, "check_format", lambda *_: None)  # a newer cairn
        latest = saver.get_tuple(thread("t"))
        assert latest is not None
        saver.put(latest.config, {**empty_checkpoint(), "v": 99}, {}, {})
        monkeypatch.undo()
        before = table_bytes(saver.store)
    with CairnSaver(store_url) as fresh:
        with pytest.raises(CheckpointFormatError, match="v=99"):
            fresh.get_tuple(thread("t"))
        assert table_bytes(fresh.store) == before


def test_a_value_with_an_unknown_tag_is_refused(store_url: str) -> None:
    """A stored value tagged by a serializer this saver was not given is refused,
    naming the tag, not decoded as garbage."""
    with CairnSaver(store_url, serde=Tagging("z9+x")) as saver:
        say(echo_graph(saver), thread("t"), "hello")
    with CairnSaver(store_url) as fresh, pytest.raises(CheckpointFormatError, match="'z9\\+x'"):
        fresh.get_tuple(thread("t"))


def test_a_row_in_an_unknown_compression_is_refused(store_url: str) -> None:
    """A stored row whose first byte names a compression this cairn does not know
    (a newer cairn's) is refused, naming it; nothing is changed."""
    with CairnSaver(store_url) as saver:
        say(echo_graph(saver), thread("t"), "hello")
        (rid, data), *_ = saver.store._exec("SELECT rid, data FROM cairn_lg_rows").rows
        saver.store._exec(
            "UPDATE cairn_lg_rows SET data = ? WHERE rid = ?", (b"\x07" + bytes(data)[1:], rid)
        )
        before = table_bytes(saver.store)
    with CairnSaver(store_url) as fresh:
        with pytest.raises(CheckpointFormatError, match="tagged 7"):
            fresh.get_tuple(thread("t"))
        assert table_bytes(fresh.store) == before


def test_a_row_changed_outside_cairn_is_refused(store_url: str) -> None:
    """A stored row cut short outside cairn does not decompress: reading refuses
    with CheckpointFormatError, and nothing changes."""
    with CairnSaver(store_url) as saver:
        say(echo_graph(saver), thread("t"), "hello " * 50)
        found = saver.store._exec("SELECT rid, data FROM cairn_lg_rows ORDER BY rid").rows
        rid, data = found[-1]
        cut = bytes(data)[: len(data) // 2]
        saver.store._exec("UPDATE cairn_lg_rows SET data = ? WHERE rid = ?", (cut, rid))
        before = table_bytes(saver.store)
    with CairnSaver(store_url) as fresh:
        with pytest.raises(CheckpointFormatError, match="LangGraph row"):
            fresh.get_tuple(thread("t"))
        assert table_bytes(fresh.store) == before


def test_a_row_whose_bytes_were_changed_in_place_is_corruption(store_url: str) -> None:
    """A stored row whose bytes were changed in place so that they still read
    (the first row of the thread, stored again as plain bytes with one byte of
    its value flipped, its checksum kept): raw deflate and plain bytes carry no
    check of their own, so only the row's checksum can tell; reading refuses
    with CheckpointFormatError saying the row is corrupt, and nothing changes."""
    with CairnSaver(store_url) as saver:
        say(echo_graph(saver), thread("t"), "hello " * 50)
        rid, base, data = saver.store._exec(
            "SELECT rid, base, data FROM cairn_lg_rows ORDER BY rid"
        ).rows[0]
        assert base is None  # its dictionary is the fixed one alone
        data = bytes(data)
        raw = bytearray(unsqueeze(data, b""))
        raw[len(raw) // 2] ^= 0x01
        forged = b"\x02" + data[1:5] + bytes(raw)
        saver.store._exec("UPDATE cairn_lg_rows SET data = ? WHERE rid = ?", (forged, rid))
        before = table_bytes(saver.store)
    with CairnSaver(store_url) as fresh:
        with pytest.raises(CheckpointFormatError, match="LangGraph row is corrupt"):
            fresh.get_tuple(thread("t"))
        assert table_bytes(fresh.store) == before


class Tagging(JsonPlusSerializer):
    """LangGraph's serializer, storing every value under tag ``tag``: what a
    serializer this cairn is not given writes."""

    def __init__(self, tag: str) -> None:
        super().__init__()
        self._tag = tag

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        kind, data = super().dumps_typed(obj)
        return (self._tag, data) if kind == "msgpack" else (kind, data)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        kind, raw = data
        return super().loads_typed(("msgpack" if kind == self._tag else kind, raw))


def table_bytes(store: Any) -> list[tuple[Any, ...]]:
    """Every row of the checkpointer's tables, as stored."""
    rows = store._exec(
        "SELECT rid, place, base, checkpoint, data FROM cairn_lg_rows ORDER BY rid"
    ).rows
    places = store._exec("SELECT * FROM cairn_lg_places ORDER BY place").rows
    return [
        tuple(bytes(v) if isinstance(v, memoryview) else v for v in row) for row in rows + places
    ]


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
        assert all_rows(store) == before
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
