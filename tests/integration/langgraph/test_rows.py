"""Format 3's rows on both stores: each text stored once, checkpoint ids of any
shape listed in text order, a turn that reads nothing back, LangGraph's rules
for repeated writes, and a checkpoint put again under its id."""

from __future__ import annotations

import random
import string
import zlib
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT

from cairn.integrations.langgraph import CairnSaver
from cairn.integrations.langgraph import _place as place_module
from tests.integration.langgraph.graphs import echo_graph, say, texts, thread


def noise(size: int, seed: int) -> str:
    """Letters that compress to about 60% and share nothing with other noise."""
    rng = random.Random(seed)
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(size))


def turn_bytes(saver: CairnSaver) -> list[int]:
    """The stored bytes of each row, in the order they were written."""
    statement = "SELECT LENGTH(data) FROM cairn_lg_rows ORDER BY rid"
    return [int(size) for (size,) in saver.store._exec(statement).rows]


def test_each_text_is_stored_once(store_url: str) -> None:
    """A turn of the echo graph holds its user text five times over (the input
    channel, the input task's write, the append, and the reply that quotes it,
    written and appended). Compressed against the rows before them, the row
    where the text first appears holds it, each of the four others takes
    under a quarter of one compressed copy, and the turn under two copies."""
    size = 2000
    with CairnSaver(store_url) as saver:
        graph = echo_graph(saver)
        for i in range(4):
            say(graph, thread("t"), noise(size, i))
        sizes = turn_bytes(saver)
    assert len(sizes) == 4 * 5
    alone = len(zlib.compress(noise(size, 9).encode(), 9))
    assert alone > size // 2  # the text does not compress away on its own
    for turn in range(4):
        first, *others = sizes[turn * 5 : turn * 5 + 5]
        assert first > alone
        assert all(other < alone / 4 for other in others)
        assert first + sum(others) < 2 * alone


ODD_IDS = [
    "1f1edebc-07fb-6b93-bfff-8ce6d2959bcc",  # LangGraph's uuid6, stored in 16 bytes
    "1F1EDEBC-07FB-6B93-BFFF-8CE6D2959BCD",  # a UUID in capitals: text, sorts by text
    "1f1edebc07fb6b93bfff8ce6d2959bcc",  # a UUID without hyphens
    "abcdefghijklmnop",  # 16 bytes of text, the size of a stored UUID
    "abcdefghijklmno\u00e9",  # 17 bytes of UTF-8
    "1f1edebc-07fb-6b93-bfff-8ce6d2959bc",  # one character short of a UUID
    "0",
    "zzz",
    "\u65e5\u672c",  # CJK
    "1f1edebc-07fb-6b93-bfff-8ce6d2959bcc-x",
]


def put_chain(saver: CairnSaver, ids: list[str]) -> None:
    """A checkpoint per id, each the child of the one before, in list order."""
    parent: str | None = None
    for step, checkpoint_id in enumerate(ids):
        configurable = {"thread_id": "odd", "checkpoint_ns": ""}
        if parent is not None:
            configurable["checkpoint_id"] = parent
        checkpoint: Any = {**empty_checkpoint(), "id": checkpoint_id}
        checkpoint["channel_values"] = {"step": step}
        checkpoint["channel_versions"] = {"step": str(step)}
        saver.put({"configurable": configurable}, checkpoint, {"step": step}, {"step": str(step)})
        parent = checkpoint_id


def listed(saver: CairnSaver, before: str | None = None, limit: int | None = None) -> list[str]:
    config: Any = {"configurable": {"thread_id": "odd"}}
    cursor: Any = None if before is None else {"configurable": {"checkpoint_id": before}}
    return [t.checkpoint["id"] for t in saver.list(config, before=cursor, limit=limit)]


def test_checkpoint_ids_of_any_shape_list_in_text_order(store_url: str) -> None:
    """Whatever a checkpoint id is (a canonical UUID, which is stored in 16 bytes,
    or any other text), list gives the ids newest first as text orders them,
    before= cuts where text comparison cuts, and each id, its parent and its
    values read back exactly, through a new saver too."""
    shuffled = random.Random(7).sample(ODD_IDS, len(ODD_IDS))
    newest_first = sorted(ODD_IDS, reverse=True)
    with CairnSaver(store_url) as saver:
        put_chain(saver, shuffled)
    with CairnSaver(store_url) as saver:
        assert listed(saver) == newest_first
        assert listed(saver, limit=3) == newest_first[:3]
        for cursor in ODD_IDS:
            assert listed(saver, before=cursor) == [i for i in newest_first if i < cursor]
        for step, checkpoint_id in enumerate(shuffled):
            config: Any = {"configurable": {"thread_id": "odd", "checkpoint_id": checkpoint_id}}
            found = saver.get_tuple(config)
            assert found is not None
            assert found.checkpoint["id"] == checkpoint_id
            assert found.checkpoint["channel_values"] == {"step": step}
            parent = found.parent_config and found.parent_config["configurable"]["checkpoint_id"]
            assert parent == (shuffled[step - 1] if step else None)
        latest = saver.get_tuple({"configurable": {"thread_id": "odd"}})
        assert latest is not None
        assert latest.checkpoint["id"] == newest_first[0]


def test_a_turn_reads_nothing_back(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a saver has read or written a thread, its turns read no stored row:
    the rows a new row is compressed against and the values it appends to are
    in the saver's memory. A new saver reads the thread once."""
    reads: list[int] = []
    real = place_module.Place.read.__func__  # type: ignore[attr-defined]

    def counted(cls: Any, counts: Any, rows: Any) -> Any:
        reads.append(1)
        return real(cls, counts, rows)

    monkeypatch.setattr(place_module.Place, "read", classmethod(counted))
    with CairnSaver(store_url) as saver:
        graph = echo_graph(saver)
        for i in range(10):
            say(graph, thread("t"), f"q{i}")
        assert len(reads) == 1  # the new thread's (empty) place, on its first put
    with CairnSaver(store_url) as saver:
        graph = echo_graph(saver)
        for i in range(10, 20):
            say(graph, thread("t"), f"q{i}")
        assert len(reads) == 2
        assert len(texts(graph.get_state(thread("t")))) == 40


def writes_of(saver: CairnSaver, config: Any) -> list[tuple[str, str, Any]]:
    found = saver.get_tuple(config)
    assert found is not None
    return list(found.pending_writes or [])


def test_repeated_writes_follow_langgraph(store_url: str) -> None:
    """A task's first write of an index stays when the task writes again; a call
    of special writes only (an error, an interrupt) replaces them; a call that
    mixes both replaces nothing (as LangGraph's PostgresSaver, and format 1).
    Each call that changes something is a row; the rule holds through a new
    saver."""
    config: Any = {"configurable": {"thread_id": "w", "checkpoint_ns": ""}}
    with CairnSaver(store_url) as saver:
        stored = saver.put(config, empty_checkpoint(), {}, {})
        saver.put_writes(stored, [("a", 1), ("b", 2)], "task")
        saver.put_writes(stored, [("a", 10), ("b", 20), ("c", 30)], "task")
        saver.put_writes(stored, [(ERROR, "first")], "task")
        saver.put_writes(stored, [(ERROR, "second"), (INTERRUPT, "why")], "task")
        saver.put_writes(stored, [("d", 4), (ERROR, "mixed")], "task")  # changes nothing
        saver.put_writes(stored, [("a", 1), ("b", 2)], "task")  # a retry: changes nothing
        expected = [
            ("task", INTERRUPT, "why"),
            ("task", ERROR, "second"),
            ("task", "a", 1),
            ("task", "b", 2),
            ("task", "c", 30),
        ]
        assert writes_of(saver, stored) == expected
        rows = saver.store._exec("SELECT COUNT(*) FROM cairn_lg_rows").rows[0][0]
        assert rows == 1 + 4  # the calls that changed nothing stored no row
    with CairnSaver(store_url) as saver:
        assert writes_of(saver, stored) == expected


def meta(step: int) -> Any:
    return {"source": "update", "step": step}


def test_a_checkpoint_put_again_replaces_it(store_url: str) -> None:
    """A checkpoint put again under its id replaces what was stored (format 1's
    upsert): its new values and metadata read back, its writes stay, and its
    child, whose values and stored bytes stood on it, still reads whole."""
    base: Any = {"configurable": {"thread_id": "again", "checkpoint_ns": ""}}
    first: Any = {**empty_checkpoint(), "channel_versions": {"k": "1"}}
    first["channel_values"] = {"k": noise(500, 1)}
    with CairnSaver(store_url) as saver:
        stored = saver.put(base, first, meta(1), {"k": "1"})
        saver.put_writes(stored, [("w", "kept")], "task")
        child: Any = {**empty_checkpoint(), "channel_versions": {"k": "1", "j": "2"}}
        child["channel_values"] = {"k": first["channel_values"]["k"], "j": noise(500, 2)}
        child_config = saver.put(stored, child, meta(2), {"j": "2"})
        again: Any = {**first, "channel_versions": {"k": "1", "m": "3"}}
        again["channel_values"] = {"k": first["channel_values"]["k"], "m": "new"}
        saver.put(base, again, meta(3), {"m": "3"})
    with CairnSaver(store_url) as saver:
        replaced = saver.get_tuple(stored)
        assert replaced is not None
        assert replaced.metadata["step"] == 3
        assert replaced.checkpoint["channel_values"] == again["channel_values"]
        assert replaced.pending_writes == [("task", "w", "kept")]
        kept = saver.get_tuple(child_config)
        assert kept is not None
        assert kept.checkpoint["channel_values"] == child["channel_values"]


def test_the_saver_keeps_a_bounded_number_of_places(monkeypatch: pytest.MonkeyPatch) -> None:
    """The places a saver keeps in memory are bounded: at most _CACHED_PLACES of
    them, and fewer while they hold more than _CACHED_BYTES of rows, the least
    recently used dropped first; the one just used always stays."""
    monkeypatch.setattr(place_module, "_CACHED_PLACES", 3)
    monkeypatch.setattr(place_module, "_CACHED_BYTES", 1000)
    places = place_module.Places()

    def sized(size: int) -> place_module.Place:
        found = place_module.Place(place_module.Counts(0, 0, 0))
        found.size = size
        return found

    for name in "abcd":
        places.keep((name, ""), sized(10))
    assert [places.get((name, "")) is not None for name in "abcd"] == [False, True, True, True]
    places.get(("b", ""))  # now the most recently used of the three
    places.keep(("big", ""), sized(995))
    assert [places.get((name, "")) is not None for name in ("b", "c", "d", "big")] == [
        False,
        False,
        False,
        True,
    ]
    places.keep(("huge", ""), sized(5000))
    assert places.get(("huge", "")) is not None
    assert places.get(("big", "")) is None
