"""The dashboard's cost figures over HTTP: a batch's and a task's pages carry
the lines ``cairn cost`` prints for the same store, below the live region, so
a poll neither carries nor reads them; a task's page lists the ``cairn
fidelity`` runs on it and no other task's."""

from __future__ import annotations

import http.client
import re
from collections.abc import Iterator
from html import unescape
from pathlib import Path
from urllib.parse import quote

import pytest

from cairn import Budget, Cairn, Context
from cairn.admin import FIDELITY_TASK, fidelity_task_id, probe_costs
from cairn.admin.budgets import budget_line, budget_views
from cairn.agent.simulate import SimulatedModelServer
from cairn.clock import FakeClock
from cairn.store import admin
from cairn.ui.server import DashboardServer, UIConfig, serve_in_thread
from tests.agent_server import openai_client
from tests.cost_run import COST_BATCH, READER, cairn_cost, cost_run


@pytest.fixture(scope="module")
def costly(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cairn, int]]:
    """The store of ``cost_run`` and the port its dashboard serves on."""
    app = cost_run(tmp_path_factory.mktemp("cost") / "cost.db")
    server = DashboardServer(("127.0.0.1", 0), UIConfig(admin(app.store), FakeClock().now))
    thread = serve_in_thread(server)
    yield app, server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join()
    app.close()


def _get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers={"Host": f"127.0.0.1:{port}", **(headers or {})})
        answer = conn.getresponse()
        return answer.status, answer.read().decode()
    finally:
        conn.close()


def _rows(html: str, kind: str) -> list[list[str]]:
    """The cells of the page's cost rows of class ``kind``, as text."""
    rows = re.findall(rf'<tr class="{kind}">(.*?)</tr>', html, re.S)
    return [
        [unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        for row in rows
    ]


def test_the_pages_carry_the_lines_cairn_cost_prints(costly: tuple[Cairn, int]) -> None:
    """The batch page's line is the batch's line of ``cairn cost`` and its task
    rows are ``cairn cost --batch``'s; a task page's line is ``cairn cost
    --task``'s (the command run in a process of its own on the same store)."""
    app, port = costly
    status, page = _get(port, f"/batch?name={COST_BATCH}")
    assert status == 200
    assert _rows(page, "cost-line") == [cairn_cost(app.store_url)[COST_BATCH]]
    per_task = cairn_cost(app.store_url, "--batch", COST_BATCH)
    assert _rows(page, "cost-task") == [row for label, row in per_task.items() if label != "total"]
    task_id = f"{COST_BATCH}/seed=2"
    _, page = _get(port, f"/task?id={quote(task_id, safe='')}")
    assert _rows(page, "cost-line") == [cairn_cost(app.store_url, "--task", task_id)[task_id]]


def test_a_poll_carries_no_cost(costly: tuple[Cairn, int]) -> None:
    """An htmx poll of the batch page answers with the live region only: no cost
    section (it is read with the whole page, not every few seconds), and a
    second poll with the digest the first gave is 204."""
    _, port = costly
    path = f"/batch?name={COST_BATCH}"
    _, full = _get(port, path)
    assert 'id="costs"' in full
    status, region = _get(port, path, {"HX-Request": "true"})
    assert status == 200
    assert 'id="live"' in region
    assert 'id="costs"' not in region
    (seen,) = re.findall(r'data-seen="([0-9a-f]+)"', region)
    status, _ = _get(port, path, {"HX-Request": "true", "X-Cairn-Seen": seen})
    assert status == 204


def test_probe_costs_are_this_tasks_runs_only(costly: tuple[Cairn, int]) -> None:
    """Probe tasks (made as ``cairn fidelity`` makes them, each with one real
    recorded call) of ``READER``'s conversation are listed on its page, newest
    first; one of a task whose id extends ``READER``'s is not, though its id
    starts the same."""
    app, port = costly

    @app.task(name=FIDELITY_TASK)
    def probe(ctx: Context, task: str) -> str:
        reply = ctx.llm_call(
            [{"role": "user", "content": task}], model="gpt-4o-mini", client=client
        )
        return str(reply.message["content"])

    ours = [fidelity_task_id(READER, "main", f"2026010{n}T000000.000000Z") for n in (1, 2)]
    other = fidelity_task_id(f"{READER}:main", "x", "20260103T000000.000000Z")
    with SimulatedModelServer() as server:
        client = openai_client(server)
        for task_id in [*ours, other]:
            app.run(probe, task_id=task_id, task=task_id)
        assert server.requests == 3
    lines = probe_costs(admin(app.store), READER)
    assert [line.label for line in lines] == ours[::-1]
    assert [line.calls for line in lines] == [1, 1]
    _, page = _get(port, f"/task?id={quote(READER, safe='')}")
    table = re.findall(r'<table id="probe-costs">(.*?)</table>', page, re.S)[0]
    listed = [unescape(t) for t in re.findall(r'<a href="[^"]*">([^<]*)</a>', table)]
    assert listed == ours[::-1]
    for line in lines:
        assert line.cells() == cairn_cost(app.store_url, "--task", line.label)[line.label]


def test_a_batch_page_shows_its_budget_and_the_tasks_parked_on_it(tmp_path: Path) -> None:
    """A batch whose budget parked a task: its page carries ``cairn cost``'s
    budget line and links the parked task, with the command that raises it."""
    with SimulatedModelServer() as server:
        app = Cairn(f"sqlite:///{tmp_path / 'cairn.db'}", clock=FakeClock())
        client = openai_client(server)

        @app.task
        def ask(ctx: Context) -> str:
            answer = ctx.llm_call(
                [{"role": "user", "content": "hi"}], model="gpt-4o", client=client
            )
            return str(answer.content)

        with app:
            app.run_batch("capped", ask, [{}], progress=False, budget=Budget(tokens=10))
            server_ui = DashboardServer(("127.0.0.1", 0), UIConfig(admin(app.store), app.clock.now))
            thread = serve_in_thread(server_ui)
            try:
                status, html = _get(server_ui.server_address[1], "/batch?name=capped")
            finally:
                server_ui.shutdown()
                server_ui.server_close()
                thread.join()
            line = budget_line(budget_views(admin(app.store), "capped")[0])
    assert status == 200
    text = unescape(re.sub(r"<[^>]+>", "", html))
    assert line in text
    assert "capped/" in text
    assert "cairn budget capped --raise usd=AMOUNT" in text
