"""Side by side (2b): one LangGraph thread of 1,000 turns, on cairn's checkpointer
and on LangGraph's own SqliteSaver.

The graph, the messages and the measurements are section (2)'s
(``bench.side_conversation``): a one-node ``StateGraph(MessagesState)`` whose
node returns the reply, a turn is ``graph.invoke`` with the user message
(~120 + ~400 characters a turn, ``bench.conversation.message_pair``), default
durability; no model is called. Only the checkpointer changes:

* ``CairnSaver`` on a cairn SQLite store (``cairn.integrations.langgraph``), at
  cairn's default ``synchronous=NORMAL`` and at ``FULL`` (SqliteSaver's);
* ``SqliteSaver`` as its docs show it (WAL, ``synchronous=FULL``).

Measured: bytes on disk over the message text; time per turn, median of the
first and of the last 10% of turns (100 of 1,000), so a time that grows with the
thread shows as last/first above 1; the load of the latest state
(``graph.get_state``), for cairn through a new ``CairnSaver`` each time, so it
rebuilds the messages from their rows as a restarted process does.

    .venv/bin/python -m bench --only langgraph [--turns 1000] [--runs 3]
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path

from bench import _peers
from bench.side_conversation import (
    Contender,
    Growth,
    Runner,
    file_bytes,
    graph_growth,
    langgraph_runner,
    report,
    run_rounds,
)
from cairn.store.sqlite import SQLiteStore, Synchronous

CAIRN_DEFAULT = "cairn CairnSaver NORMAL (default)"
CAIRN_FULL = "cairn CairnSaver FULL"


def cairn_runner(synchronous: Synchronous) -> Runner:
    def run(path: Path, turns: int) -> Growth:
        from cairn.integrations.langgraph import CairnSaver

        store = SQLiteStore(path, synchronous=synchronous)
        try:
            # Each load through a new saver: no cache, as SqliteSaver has none.
            fresh = partial(CairnSaver, store)
            timings, load_ms, loaded = graph_growth(CairnSaver(store), turns, fresh)
        finally:
            store.close()
        return Growth(file_bytes(path), timings, load_ms, loaded)

    return run


def main(workdir: Path, runs: int, sizes: Sequence[int]) -> str:
    if not (_peers.installed("langgraph") and _peers.installed("langgraph-checkpoint-sqlite")):
        return _peers.missing_note("langgraph / langgraph-checkpoint-sqlite") + "\n"
    found = [
        Contender(CAIRN_DEFAULT, cairn_runner("NORMAL")),
        Contender(CAIRN_FULL, cairn_runner("FULL")),
        Contender("LangGraph SqliteSaver", langgraph_runner),
    ]
    run_rounds(found, workdir, runs, sizes)
    title = "(2b) one LangGraph thread: CairnSaver vs SqliteSaver, one message pair a turn"
    return report(found, runs, sizes, title=title, baseline=CAIRN_FULL)
