"""A PostgreSQL outage while an agent's conversation is written.

The database is a private cluster of the test's own (``tests/pgcluster.py``),
stopped while the agent writes: once while the model's reply is on its way to
the store, once right as ``conv.extend`` writes two messages. It is started
again as soon as cairn's pool has noticed the loss (its log line), so the write
meets the outage whatever the machine's speed. The model server counts every
request: a reply the store could not take at once must be waited with, not
asked for again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from cairn import Cairn, Context
from cairn.agent import assistant, user
from cairn.clock import FakeClock
from tests.agent_server import model_server, openai_client
from tests.pgcluster import Cluster

REPLY = "The ledger balances."
WAIT = 120.0


class _Noticed(logging.Handler):
    """Sets ``lost`` when cairn logs that it lost (or cannot reach) PostgreSQL."""

    def __init__(self) -> None:
        super().__init__()
        self.lost = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "PostgreSQL" in message and ("lost" in message or "cannot reach" in message):
            self.lost.set()


@pytest.fixture
def noticed() -> Iterator[_Noticed]:
    handler = _Noticed()
    log = logging.getLogger("cairn")
    log.addHandler(handler)
    try:
        yield handler
    finally:
        log.removeHandler(handler)


def _outage(cluster: Cluster, noticed: _Noticed) -> threading.Thread:
    """Stop ``cluster`` now; start it again once cairn noticed (in a thread)."""
    noticed.lost.clear()
    cluster.stop()

    def back() -> None:
        noticed.lost.wait(WAIT)
        cluster.start()

    restart = threading.Thread(target=back, daemon=True)
    restart.start()
    return restart


def test_an_outage_while_a_reply_and_an_extend_are_written_repeats_nothing(
    pg_cluster: Cluster, clock: FakeClock, noticed: _Noticed
) -> None:
    """The cluster stops while the model answers (the reply reaches a store that
    is down) and again right before ``conv.extend``: each write waits for the
    server and goes through once it is back. The model server got one request,
    the reply and the two extended messages are stored once each, and the task
    completes."""
    url = pg_cluster.create_database("cairn")
    restarts: list[threading.Thread] = []

    def model(request: dict[str, Any]) -> dict[str, Any]:
        restarts.append(_outage(pg_cluster, noticed))
        return {"role": "assistant", "content": REPLY}

    with model_server(model) as server, Cairn(url, clock=clock) as app:
        client = openai_client(server)

        @app.task(name="agent")
        def agent(ctx: Context) -> int:
            conv = ctx.conversation("main", client=client)
            conv.append(user("How is the ledger?"))
            ctx.llm(conv, model="gpt-4o-mini")
            restarts[0].join(WAIT)
            restarts.append(_outage(pg_cluster, noticed))
            conv.extend([user("Note it."), assistant("Noted.")])
            return conv.position

        assert app.run(agent, task_id="a") == 4
        assert server.requests == 1
        rows = app.store.load_messages("a", "main", 0, 10)
    for restart in restarts:
        restart.join(WAIT)
    assert [(r.idx, r.role) for r in rows] == [
        (0, "user"),
        (1, "assistant"),
        (2, "user"),
        (3, "assistant"),
    ]
    assert REPLY in rows[1].content
