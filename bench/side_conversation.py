"""Side by side (2): how a conversation's stored state grows, turn after turn.

Each turn appends one user message (~120 characters) and one assistant reply
(~400 characters), the pair ``bench.conversation.message_pair`` makes, identical
text for every library; no model is called. Contenders, each on a fresh SQLite
file:

* cairn ``ctx.conversation``: one ``conv.extend([user, reply])`` per turn (one
  commit, as the Agents SDK's ``add_items``), at
  ``synchronous=NORMAL`` (cairn's default) and ``FULL`` (the peers' default), and
  at ``FULL`` with ``conv.compact()`` after each turn (the default summarizer and
  thresholds), which bounds what a resume loads;
* LangGraph: a one-node ``StateGraph(MessagesState)`` (the default ``add_messages``
  reducer) compiled with ``SqliteSaver``; a turn is ``graph.invoke`` with the user
  message, the node returns the reply; the default durability ("async", every
  checkpoint written before ``invoke`` returns); SQLite defaults (WAL as the
  saver sets it, ``synchronous=FULL``);
* OpenAI Agents SDK ``SQLiteSession``: one ``add_items([user, reply])`` per turn,
  as ``Runner`` stores a turn; its defaults (WAL, ``synchronous=FULL``).

Measured: bytes on disk (the file's ``page_count * page_size`` after closing the
library and a ``wal_checkpoint(TRUNCATE)``, so the WAL is folded in); time per
turn, median of the first and of the last 10% of turns; time to load the latest
state (cairn ``load_conversation``, LangGraph ``graph.get_state``, Agents
``session.get_items()``), median of several loads on the open store.
"""

from __future__ import annotations

import asyncio
import sqlite3
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import _peers
from bench._stats import fmt_ratio, median, ratio, table
from bench.conversation import TASK_ID, message_pair
from cairn import Cairn, Context
from cairn.agent import load_conversation
from cairn.store.sqlite import Synchronous

LOADS = 10  # loads of the latest state per measurement


@dataclass(frozen=True, slots=True)
class Growth:
    disk_bytes: int
    turn_us: list[float]  # every turn, in order
    load_ms: float
    messages_loaded: int

    def first_us(self) -> float:
        return statistics.median(self.turn_us[: self.decile()])

    def last_us(self) -> float:
        return statistics.median(self.turn_us[-self.decile() :])

    def decile(self) -> int:
        return max(1, len(self.turn_us) // 10)


Runner = Callable[[Path, int], Growth]  # (fresh file, turns) -> what it measured


def file_bytes(path: Path) -> int:
    """Bytes the database holds once its WAL is folded back into the file."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()
    return int(pages) * int(size)


def text_bytes(turns: int) -> int:
    """The message text itself, UTF-8: what no store can go below."""
    return sum(
        len(str(message["content"]).encode()) for i in range(turns) for message in message_pair(i)
    )


def timed_loads(load: Callable[[], int]) -> tuple[float, int]:
    times, count = [], 0
    for _ in range(LOADS):
        start = time.perf_counter()
        count = load()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3, count


# -- cairn ----------------------------------------------------------------------------------
def cairn_runner(synchronous: Synchronous, compact: bool) -> Runner:
    def run(path: Path, turns: int) -> Growth:
        app = Cairn(f"sqlite:///{path}", synchronous=synchronous)
        timings: list[float] = []

        def chat(ctx: Context) -> int:
            conv = ctx.conversation("main")
            for i in range(turns):
                start = time.perf_counter()
                conv.extend(message_pair(i))
                if compact:
                    conv.compact()
                timings.append(time.perf_counter() - start)
            return len(conv)

        task = app.task(name="chat")(chat)
        with app:
            _ = app.store  # opened before timing, as the peers' files are
            app.run(task, task_id=TASK_ID)

            def load() -> int:
                view = load_conversation(app.store, TASK_ID)
                assert view is not None
                return len(view.messages)

            load_ms, loaded = timed_loads(load)
        return Growth(file_bytes(path), [t * 1e6 for t in timings], load_ms, loaded)

    return run


# -- LangGraph ------------------------------------------------------------------------------
def graph_growth(
    checkpointer: Any,
    turns: int,
    fresh: Callable[[], Any] | None = None,
    pair: Callable[[int], Sequence[Any]] = message_pair,
) -> tuple[list[float], float, int]:
    """``turns`` turns of the one-node messages graph on ``checkpointer``: each
    turn's µs, then the load of the latest state (ms, and messages loaded), each
    load through a new checkpointer from ``fresh`` if given (a cold read).
    ``pair(i)`` is turn i's user message and reply."""
    config: Any = {"configurable": {"thread_id": TASK_ID}}
    replies: dict[str, Any] = {}  # the reply the node returns on this turn
    graph = messages_graph(checkpointer, replies)
    timings: list[float] = []
    for i in range(turns):
        question, answer = pair(i)
        replies["next"] = answer
        start = time.perf_counter()
        turn: Any = {"messages": [question]}  # add_messages takes OpenAI-shaped dicts
        graph.invoke(turn, config)
        timings.append(time.perf_counter() - start)

    def load() -> int:
        if fresh is None:
            return len(graph.get_state(config).values["messages"])
        cold = fresh()
        try:
            return len(messages_graph(cold, replies).get_state(config).values["messages"])
        finally:
            cold.close()

    load_ms, loaded = timed_loads(load)
    return [t * 1e6 for t in timings], load_ms, loaded


def messages_graph(checkpointer: Any, replies: dict[str, Any]) -> Any:
    """A one-node ``StateGraph(MessagesState)`` whose node returns ``replies["next"]``."""
    from langgraph.graph import START, MessagesState, StateGraph

    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [replies["next"]]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=checkpointer)


def langgraph_runner(path: Path, turns: int) -> Growth:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(path, check_same_thread=False)  # as the saver's docs show
    try:
        timings, load_ms, loaded = graph_growth(SqliteSaver(conn), turns)
    finally:
        conn.close()
    return Growth(file_bytes(path), timings, load_ms, loaded)


# -- OpenAI Agents SDK -----------------------------------------------------------------------
def agents_runner(path: Path, turns: int) -> Growth:
    from agents import SQLiteSession

    session = SQLiteSession(TASK_ID, str(path))
    loop = asyncio.new_event_loop()
    timings: list[float] = []
    try:
        for i in range(turns):
            items: list[Any] = list(message_pair(i))
            start = time.perf_counter()
            loop.run_until_complete(session.add_items(items))
            timings.append(time.perf_counter() - start)

        def load() -> int:
            return len(loop.run_until_complete(session.get_items()))

        load_ms, loaded = timed_loads(load)
    finally:
        session.close()
        loop.close()
    return Growth(file_bytes(path), [t * 1e6 for t in timings], load_ms, loaded)


# -- rounds and the table ----------------------------------------------------------------------
@dataclass
class Contender:
    label: str
    run: Runner
    found: dict[int, list[Growth]] = field(default_factory=dict)  # turns -> per round


CAIRN_DEFAULT = "cairn NORMAL (default)"
CAIRN_FULL = "cairn FULL"


def contenders() -> tuple[list[Contender], list[str]]:
    found = [
        Contender(CAIRN_DEFAULT, cairn_runner("NORMAL", compact=False)),
        Contender(CAIRN_FULL, cairn_runner("FULL", compact=False)),
        Contender("cairn FULL + compact", cairn_runner("FULL", compact=True)),
    ]
    notes = []
    if _peers.installed("langgraph") and _peers.installed("langgraph-checkpoint-sqlite"):
        found.append(Contender("LangGraph SqliteSaver", langgraph_runner))
    else:
        notes.append(_peers.missing_note("langgraph / langgraph-checkpoint-sqlite"))
    if _peers.installed("openai-agents"):
        found.append(Contender("Agents SDK SQLiteSession", agents_runner))
    else:
        notes.append(_peers.missing_note("openai-agents"))
    return found, notes


def run_rounds(found: Sequence[Contender], workdir: Path, runs: int, sizes: Sequence[int]) -> None:
    for round_ in range(runs):
        for turns in sizes:
            for number, contender in enumerate(found):
                path = workdir / f"conv-{number}-{turns}-{round_}.db"
                growth = contender.run(path, turns)
                contender.found.setdefault(turns, []).append(growth)
                for stale in workdir.iterdir():  # LangGraph's file reaches gigabytes
                    stale.unlink()


def report(
    found: Sequence[Contender],
    runs: int,
    sizes: Sequence[int],
    *,
    title: str = "(2) conversation growth: one user + one assistant message a turn",
    baseline: str = CAIRN_FULL,
) -> str:
    """The table, then each peer against ``baseline`` (contenders whose label
    starts with "cairn" are cairn's)."""
    by_label = {c.label: c for c in found}
    headers = [
        "contender",
        "turns",
        "MB on disk",
        "x text",
        "turn us first10%",
        "last10%",
        "last/first",
        "load ms",
        "msgs",
    ]
    rows = []
    for turns in sizes:
        text = text_bytes(turns)
        for c in found:
            grown = c.found[turns]
            disk = median([g.disk_bytes for g in grown])
            first = median([g.first_us() for g in grown])
            last = median([g.last_us() for g in grown])
            rows.append(
                [
                    c.label,
                    str(turns),
                    f"{disk / 1e6:.2f}",
                    fmt_ratio(ratio(disk, text)),
                    f"{first:.0f}",
                    f"{last:.0f}",
                    fmt_ratio(median([ratio(g.last_us(), g.first_us()) for g in grown])),
                    f"{median([g.load_ms for g in grown]):.2f}",
                    str(grown[0].messages_loaded),
                ]
            )
    lines = [
        f"{title}, {runs} interleaved round(s) (medians); x text = bytes on disk / "
        "UTF-8 message text",
        table(headers, rows),
    ]
    for turns in sizes:
        for c in found:
            if not c.label.startswith("cairn"):
                ours = by_label[baseline]
                lines.append(
                    f"{turns} turns, {c.label} / {baseline}: " + peer_ratios(c, ours, turns)
                )
    return "\n".join(lines) + "\n"


def peer_ratios(peer: Contender, ours: Contender, turns: int) -> str:
    """Per round ratios, medians: above 1 means the peer stores or takes more."""
    pairs = list(zip(peer.found[turns], ours.found[turns], strict=True))

    def of(measure: Callable[[Growth], float]) -> str:
        return fmt_ratio(median([ratio(measure(p), measure(o)) for p, o in pairs]))

    return (
        f"bytes {of(lambda g: g.disk_bytes)}, turn first10% {of(Growth.first_us)}, "
        f"turn last10% {of(Growth.last_us)}, load {of(lambda g: g.load_ms)}"
    )


def main(workdir: Path, runs: int, sizes: Sequence[int]) -> str:
    found, notes = contenders()
    run_rounds(found, workdir, runs, sizes)
    return "\n".join([*notes, report(found, runs, sizes)])
