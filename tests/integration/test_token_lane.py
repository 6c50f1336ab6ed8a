"""The ephemeral lane: a streamed call's text reaches watchers (the library's
``tail`` and ``cairn tail``) while the call is still streaming, and nothing of
it is stored per token.

The model server (simulated, streaming) holds its stream part way
(``hold_next``), so the test looks at the watchers and the store while the
call is in flight, before its entry and reply row exist.
"""

from __future__ import annotations

import http.client
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cairn import Cairn, Context
from cairn.agent import user
from cairn.cli import app as cli_app
from cairn.observe.lane import lane_url, serve_lane, tail
from cairn.store import admin
from cairn.testing.servers import wait_until
from cairn.ui.server import DashboardServer, UIConfig, serve_in_thread
from tests.agent_server import Scripted, model_server, openai_client

REPLY = "The quarterly figures are in: sales rose in every region but the north, which fell."
WAIT = 30.0


@pytest.fixture(autouse=True)
def lanes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test's own lanes directory."""
    path = tmp_path / "lanes"
    monkeypatch.setenv("CAIRN_LANES", str(path))
    return path


def test_a_streamed_calls_text_reaches_watchers_before_it_is_recorded(tmp_path: Path) -> None:
    """Held part way through the stream: the library watcher has the first
    pieces, ``cairn tail`` is attached, and the store holds no reply row and
    no entry for the call. Released: both watchers get the whole text and the
    task's end; the store holds one entry and one reply row for the call, as
    a call never watched does."""
    url = f"sqlite:///{tmp_path / 'c.db'}"
    app = Cairn(url)
    lane = serve_lane(app)
    try:
        with model_server(Scripted([REPLY])) as server:
            hold = server.hold_next(after=4)

            @app.task(name="talk")
            def talk(ctx: Context) -> str:
                conv = ctx.conversation("main", client=openai_client(server))
                conv.append(user("How did the quarter go?"))
                return str(ctx.llm(conv, model="gpt-4o-mini", stream=True).content)

            seen: list[dict[str, Any]] = []
            watcher = threading.Thread(target=lambda: seen.extend(tail(lane.url, "t")))
            watcher.start()
            assert wait_until(lambda: lane.watching("t") == 1, WAIT)
            answer: list[str] = []
            runner = threading.Thread(target=lambda: answer.append(app.run(talk, task_id="t")))
            runner.start()
            assert hold.reached.wait(WAIT)
            assert wait_until(lambda: any("text" in s for s in seen), WAIT)
            assert lane_url(app.owner) == lane.url
            cli_output: list[str] = []
            cli = threading.Thread(
                target=lambda: cli_output.append(
                    CliRunner().invoke(cli_app, ["tail", "t", "--store", url]).output
                )
            )
            cli.start()
            assert wait_until(lambda: lane.watching("t") == 2, WAIT)
            rows = app.store.load_messages("t", "main", 0, 100)
            assert [r.role for r in rows] == ["user"]  # no reply row yet
            assert not [s for s in app.store.load_history("t").values() if s.kind == "llm"]
            hold.release()
            for thread in (runner, watcher, cli):
                thread.join(WAIT)
                assert not thread.is_alive()
    finally:
        lane.close()
    assert answer == [REPLY]
    text = "".join(str(s["text"]) for s in seen if "text" in s)
    assert text == REPLY
    assert seen[0] == {"call": "llm main"}
    assert seen[-2:] == [{"done": "llm main"}, {"ended": "completed"}]
    assert cli_output
    assert REPLY.split()[-1] in cli_output[0]
    assert "[task t completed]" in cli_output[0]
    assert [s.kind for s in app.store.load_history("t").values()] == ["llm"]
    assert [r.role for r in app.store.load_messages("t", "main", 0, 100)] == ["user", "assistant"]
    assert not lane_url(app.owner)  # closed: its file is gone
    app.close()


def test_tail_says_when_there_is_nothing_to_watch(tmp_path: Path) -> None:
    """A task that is not running, or not there: one line saying so, exit 2."""
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with Cairn(url) as app:

        @app.task(name="quick")
        def quick(ctx: Context) -> int:
            return 1

        app.run(quick, task_id="q")
    result = CliRunner().invoke(cli_app, ["tail", "q", "--store", url])
    assert result.exit_code == 2
    assert "is completed, not running: there is nothing to tail" in result.output
    missing = CliRunner().invoke(cli_app, ["tail", "nope", "--store", url])
    assert missing.exit_code != 0
    assert "nope" in missing.output


def test_the_dashboards_task_page_relays_the_lane(tmp_path: Path) -> None:
    """The page of a running task points its live text at /task/tail, which
    relays the lane's events (connected while the stream is held: the rest of
    the text once released, then the task's end); once the task has ended the
    relay answers 204 (nothing to watch: the browser does not reconnect) and
    the page no longer points at it."""
    token = "lane-token-0123456789abcdef"
    app = Cairn(f"sqlite:///{tmp_path / 'c.db'}")
    lane = serve_lane(app)
    server = DashboardServer(
        ("127.0.0.1", 0), UIConfig(admin(app.store), app.clock.now, token=token)
    )
    serving = serve_in_thread(server)
    port = server.server_address[1]
    headers = {"Host": f"127.0.0.1:{port}", "Authorization": f"Bearer {token}"}

    def get(path: str) -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
        try:
            conn.request("GET", path, headers=headers)
            got = conn.getresponse()
            return got.status, got.read().decode()
        finally:
            conn.close()

    relayed: list[str] = []

    def watch() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
        conn.request("GET", "/task/tail?id=t", headers=headers)
        got = conn.getresponse()
        for raw in got:
            relayed.append(raw.decode())
            if '"ended"' in raw.decode():
                break
        conn.close()

    try:
        with model_server(Scripted([REPLY])) as model:
            hold = model.hold_next(after=4)

            @app.task(name="talk")
            def talk(ctx: Context) -> str:
                conv = ctx.conversation("main", client=openai_client(model))
                conv.append(user("How did the quarter go?"))
                return str(ctx.llm(conv, model="gpt-4o-mini", stream=True).content)

            runner = threading.Thread(target=lambda: app.run(talk, task_id="t"))
            runner.start()
            assert hold.reached.wait(WAIT)
            status, page = get("/task?id=t")
            assert status == 200
            assert 'data-tail="/task/tail?id=t"' in page
            watcher = threading.Thread(target=watch)
            watcher.start()
            assert wait_until(lambda: lane.watching("t") == 1, WAIT)
            hold.release()
            for thread in (runner, watcher):
                thread.join(WAIT)
                assert not thread.is_alive()
        events = [
            json.loads(line[len("data: ") :]) for line in relayed if line.startswith("data: ")
        ]
        # Connected while the stream was held: what came after, to the end.
        relayed_text = "".join(str(e["text"]) for e in events if "text" in e)
        assert relayed_text
        assert REPLY.endswith(relayed_text)
        assert events[-1] == {"ended": "completed"}
        assert get("/task/tail?id=t")[0] == 204
        assert "data-tail" not in get("/task?id=t")[1]
    finally:
        server.shutdown()
        server.server_close()
        serving.join()
        lane.close()
        app.close()
