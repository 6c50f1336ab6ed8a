"""Usage cairn counted itself is said to be so: a model call whose answer carried
no usage is recorded with cairn's estimate, marked, and ``cairn cost``, its
``--json`` and the dashboard say how much of their tokens is such an estimate.

The model servers are local (``SimulatedModelServer(report_usage=False)``
answers without usage, as some servers do), and count every request.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from cairn import Cairn, Context
from cairn.admin import costs
from cairn.agent import LLMSummarizer, Reply, user
from cairn.agent.costs import COST_COLUMNS
from cairn.agent.simulate import SimulatedModelServer
from cairn.clock import FakeClock
from cairn.store import admin
from cairn.ui.server import DashboardServer, UIConfig, serve_in_thread
from tests.agent_server import Scripted, anthropic_client, model_server, openai_client
from tests.cost_run import cairn_process
from tests.integration.test_ui_cost import _get, _rows

BATCH = "mixed"
TURNS = 12
ESTIMATED = COST_COLUMNS.index("tokens estimated")


def _batch(app: Cairn, counting: SimulatedModelServer, silent: SimulatedModelServer) -> None:
    """Two note-taking agents that compact: one on a server that reports usage,
    one (its summarizer too) on a server that reports none."""

    @app.task(name="notes")
    def notes(ctx: Context, server: str) -> int:
        model = counting if server == "counting" else silent
        conv = ctx.conversation(
            "main",
            threshold=1200,
            keep_tail=300,
            summarizer=LLMSummarizer(openai_client(model), model="gpt-4o-mini"),
            summary_tokens=300,
            client=openai_client(model),
        )
        for turn in range(TURNS):
            conv.append(user(f"turn {turn}: " + "the data says something. " * 24))
            ctx.llm(conv, model="gpt-4o-mini")
        return conv.stats.compactions

    items = [{"server": "counting"}, {"server": "silent"}]
    report = app.run_batch(BATCH, notes, items, progress=False)
    assert report.completed == 2


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cairn, int, int]]:
    """The store of ``_batch``, the number of requests the silent server got,
    and the port of a dashboard on the store."""
    path = tmp_path_factory.mktemp("mixed") / "mixed.db"
    app = Cairn(f"sqlite:///{path}", clock=FakeClock())
    with (
        model_server(Scripted(["Noted."])) as counting,
        SimulatedModelServer(Scripted(["Noted."]), report_usage=False) as silent,
    ):
        _batch(app, counting, silent)
        silent_requests = silent.requests
    server = DashboardServer(("127.0.0.1", 0), UIConfig(admin(app.store), FakeClock().now))
    thread = serve_in_thread(server)
    yield app, silent_requests, server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join()
    app.close()


def test_the_cost_lines_say_how_much_of_their_tokens_is_estimated(
    mixed: tuple[Cairn, int, int],
) -> None:
    """The task on the silent server: every model call and summarizer request
    (as many as its server answered) is counted as estimated, all its tokens
    (100%); the other task's none (0%); the batch's share is the silent task's
    tokens over the batch's."""
    app, silent_requests, _ = mixed
    report = costs(admin(app.store), batch=BATCH)
    lines = {line.label: line for line in report.lines}
    silent, counted = lines[f"{BATCH}/server=silent"], lines[f"{BATCH}/server=counting"]
    assert silent.compactions >= 1
    assert silent.estimated_calls == silent_requests == TURNS + silent.compactions
    assert silent.estimated_usage.input_tokens == silent.usage.input_tokens > 0
    assert silent.estimated_usage.output_tokens == silent.usage.output_tokens > 0
    assert (silent.cells()[ESTIMATED], counted.cells()[ESTIMATED]) == ("100%", "0%")
    assert (counted.estimated_calls, counted.estimated_note()) == (0, None)
    total = report.total
    tokens = total.usage.input_tokens + total.usage.output_tokens
    share = (silent.usage.input_tokens + silent.usage.output_tokens) / tokens
    assert total.estimated_share == pytest.approx(share)
    assert total.cells()[ESTIMATED] == f"{share:.0%}"


def test_cairn_cost_prints_the_share_and_says_what_is_estimated(
    mixed: tuple[Cairn, int, int],
) -> None:
    """``cairn cost`` (the installed command): the column for each task and the
    total, a note on stderr naming the calls and tokens that are estimates, and
    in ``--json`` the estimated calls and tokens of each line."""
    app, silent_requests, _ = mixed
    total = costs(admin(app.store), batch=BATCH).total
    done = cairn_process("cost", "--store", app.store_url, "--batch", BATCH)
    rows = {row[0]: row for row in (line.split() for line in done.stdout.splitlines()[1:])}
    header = done.stdout.splitlines()[0]
    assert "tokens estimated" in header
    lines = {line.label: line.cells() for line in costs(admin(app.store), batch=BATCH).lines}
    assert rows[f"{BATCH}/server=silent"] == lines[f"{BATCH}/server=silent"]
    assert rows["total"][ESTIMATED] == total.cells()[ESTIMATED]
    note = " ".join(done.stderr.split())
    assert f"{silent_requests} model call(s) came back without usage" in note
    estimated = total.estimated_usage
    assert f"{estimated.input_tokens} of the {total.usage.input_tokens} tokens in" in note
    printed = json.loads(cairn_process("cost", "--store", app.store_url, "--json").stdout)
    line = printed["total"]
    assert line["estimated_usage_calls"] == silent_requests
    assert line["estimated_input_tokens"] == estimated.input_tokens
    assert line["estimated_output_tokens"] == estimated.output_tokens
    assert line["estimated_token_share"] == pytest.approx(total.estimated_share, abs=1e-6)


def test_the_dashboard_shows_the_share_and_the_note(mixed: tuple[Cairn, int, int]) -> None:
    """The batch page's cost line and task rows carry the same column as
    ``cairn cost``, and the page says what is estimated under them."""
    app, _, port = mixed
    report = costs(admin(app.store), batch=BATCH)
    status, page = _get(port, f"/batch?name={BATCH}")
    assert status == 200
    line = _rows(page, "cost-line")[0]
    assert line[ESTIMATED] == report.total.cells()[ESTIMATED]
    rows = {row[0]: row[ESTIMATED] for row in _rows(page, "cost-task")}
    assert rows == {f"{BATCH}/server=counting": "0%", f"{BATCH}/server=silent": "100%"}
    note = report.total.estimated_note()
    assert note is not None
    assert note.replace("'", "&#39;") in page


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_an_answer_without_usage_is_recorded_as_estimated(
    app: Cairn, api: str, stream: bool
) -> None:
    """Each API, whole or streamed, against a server that sends no usage: the
    call is made once, and its recorded usage is cairn's count, marked
    estimated (an Anthropic message without usage raised before, or was
    recorded as 0 tokens counted when streamed)."""
    with SimulatedModelServer(Scripted(["Noted, all of it."]), report_usage=False) as server:
        client: Any = openai_client(server) if api == "openai" else anthropic_client(server)

        @app.task(name="ask")
        def ask(ctx: Context) -> dict[str, Any]:
            reply = ctx.llm_call([user("note this")], model="m", client=client, stream=stream)
            assert isinstance(reply, Reply)  # a sync client
            return reply.usage.to_dict()

        usage = app.run(ask, task_id="a")
        assert server.requests == 1
    assert usage["estimated"]
    assert usage["input_tokens"] > 0
    assert usage["output_tokens"] > 0


def test_a_conversation_page_marks_the_estimated_calls(mixed: tuple[Cairn, int, int]) -> None:
    """A conversation's page lists each recorded call with its tokens: those of
    the task on the silent server are marked ``est.``, the others are not."""
    _, silent_requests, port = mixed
    marked = []
    for server in ("silent", "counting"):
        task_id = quote(f"{BATCH}/server={server}", safe="")
        status, page = _get(port, f"/conversation?task={task_id}")
        assert status == 200
        marked.append(page.count(">est.</span>"))
    assert marked == [silent_requests, 0]
