"""The dashboard's counts read as English: "3 batches" under the batch list
(it said "3 batchs"), "1 batch", "2 tasks", served by the real server."""

from __future__ import annotations

import http.client
import re
from collections.abc import Iterator

import pytest

from cairn import Cairn, Context
from cairn.clock import FakeClock
from cairn.store import admin
from cairn.ui.server import DashboardServer, UIConfig, serve_in_thread


@pytest.fixture
def dashboard(app: Cairn, clock: FakeClock) -> Iterator[tuple[Cairn, int]]:
    """The dashboard on 127.0.0.1 over ``app``'s store, and its port."""
    server = DashboardServer(("127.0.0.1", 0), UIConfig(admin(app.store), clock.now))
    thread = serve_in_thread(server)
    try:
        yield app, int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _total(port: int, path: str) -> str:
    """The pager's count on the page at ``path``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers={"Host": f"127.0.0.1:{port}"})
        answer = conn.getresponse()
        body = answer.read().decode()
    finally:
        conn.close()
    assert answer.status == 200, body
    found = re.search(r'id="total">([^<]*)<', body)
    assert found is not None, body
    return found[1]


def test_the_batch_and_task_counts_are_proper_plurals(dashboard: tuple[Cairn, int]) -> None:
    """One batch of two tasks shows "1 batch" and "2 tasks"; three batches show
    "3 batches" on the batch list."""
    app, port = dashboard

    @app.task
    def hello(ctx: Context, n: int) -> int:
        return ctx.step("double", lambda: 2 * n)

    app.run_batch("first", hello, [{"n": 1}, {"n": 2}], progress=False)
    assert _total(port, "/") == "1 batch"
    assert _total(port, "/tasks?batch=first") == "2 tasks"
    for name in ("second", "third"):
        app.run_batch(name, hello, [{"n": 1}], progress=False)
    assert _total(port, "/") == "3 batches"
