"""Conversation writes whose commit PostgreSQL made but whose answer was lost.

The connection drops after the server committed a conversation's new rows and
before its answer arrived (``tests/pgproxy.py`` throws that answer away). The
store's pool reconnects and runs the write again; the rows are there already,
and that must read as the write having worked, not as a clash: the task goes
on, each row is stored once, and no model request is sent again. The shared
server is never stopped: only the test's own connection is cut.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cairn import Cairn, Context
from cairn.agent import assistant, user
from cairn.clock import FakeClock
from tests.agent_server import Scripted, model_server, openai_client
from tests.pgproxy import LosingProxy

REPLY = "The ledger balances (reply-marker-31)."


@pytest.fixture
def proxy(pg_url: str) -> Iterator[LosingProxy]:
    """A proxy to the test's PostgreSQL database."""
    with LosingProxy(pg_url) as running:
        yield running


def _contents(app: Cairn, task_id: str) -> list[Any]:
    return [row.content for row in app.store.load_messages(task_id, "main", 0, 100)]


def test_extend_whose_commit_answer_was_lost_is_not_a_clash(
    proxy: LosingProxy, clock: FakeClock
) -> None:
    """``conv.extend`` of two messages (one transaction): the server commits
    it, its answer to COMMIT is lost, the pool runs the transaction again and
    finds the rows: extend returns, the task completes, and each message is
    stored once."""
    with Cairn(proxy.url, clock=clock) as app:

        @app.task(name="talk")
        def talk(ctx: Context) -> int:
            conv = ctx.conversation("main", system="Be brief.")
            proxy.lose_answer(after=b"extend-marker-17", to=b"COMMIT")
            conv.extend([user("extend-marker-17: two rows"), assistant("Noted.")])
            return conv.position

        assert app.run(talk, task_id="t") == 3
        assert proxy.lost == 1
        contents = _contents(app, "t")
    assert len(contents) == 3
    assert "extend-marker-17" in contents[1]


def test_a_reply_row_whose_answer_was_lost_is_not_asked_again(
    proxy: LosingProxy, clock: FakeClock
) -> None:
    """The reply row of a ``ctx.llm`` call (one autocommit INSERT) is committed
    and its answer lost: the retried write finds its own row, the call is
    recorded, the model server saw one request, and the reply is stored once."""
    with model_server(Scripted([REPLY])) as server, Cairn(proxy.url, clock=clock) as app:
        client = openai_client(server)

        @app.task(name="ask")
        def ask(ctx: Context) -> str:
            conv = ctx.conversation("main", client=client)
            conv.append(user("How is the ledger?"))
            proxy.lose_answer(after=b"reply-marker-31")
            return str(ctx.llm(conv, model="gpt-4o-mini").content)

        assert app.run(ask, task_id="a") == REPLY
        assert proxy.lost == 1
        assert server.requests == 1
        contents = _contents(app, "a")
    assert [("reply-marker-31" in c) for c in contents] == [False, True]
