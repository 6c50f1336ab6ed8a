"""Debounce and singleton keys raced by many processes, on SQLite and PostgreSQL.

* 4 processes send 1,000 events of one debounce key in a burst: the store
  orders them (each answer's event count is its place in commit order), and the
  one task runs once, with the arguments of the event committed last.
* 8 processes send events of one singleton key (half drop, half queue) and
  run workers at once: a server of the test's own counts the tasks inside the
  function at each moment, and never sees two.

Each sender waits for a line on its stdin before sending, so all start
together. Both tests are ``slow`` (processes, a thousand commits).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from cairn import Cairn, Context
from cairn.clock import FakeClock
from cairn.store import admin
from cairn.worker import Worker

pytestmark = pytest.mark.slow

_DEBOUNCER = """
import json, sys
from cairn import Cairn
url, sender, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
app = Cairn(url)

@app.task(name="reindex")
def reindex(ctx, doc: str, sender: int, n: int) -> None:
    raise AssertionError("the senders never run it")

print("ready", flush=True)
sys.stdin.readline()
sent = []
for n in range(count):
    answer = app.submit(
        "docs", reindex, {"doc": "a", "sender": sender, "n": n},
        key=lambda item: item["doc"], debounce=3600,
    )
    sent.append([sender, n, answer.task_id, answer.outcome, answer.events])
print(json.dumps(sent), flush=True)
app.close()
"""

_SINGLETON = """
import json, sys, time, urllib.request
from cairn import Cairn
from cairn.store import admin
from cairn.worker import Worker
url, port, sender, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
app = Cairn(url)

def call(path):
    urllib.request.urlopen(f"http://127.0.0.1:{port}/{path}", data=b"", timeout=30).read()

@app.task(name="guarded")
def guarded(ctx, sender: int, n: int) -> None:
    call("enter")
    time.sleep(0.02)  # real-sleep-ok: a second task inside now would overlap this one
    call("leave")

print("ready", flush=True)
sys.stdin.readline()
mode = "queue" if sender % 2 else "drop"
sent = []
for n in range(rounds):
    answer = app.submit("jobs", guarded, {"sender": sender, "n": n}, singleton="the-key",
                        on_conflict=mode)
    sent.append(answer.outcome)
    Worker(app, burst=True, concurrency=2).run()
store = admin(app.store)
while any(t.status in ("pending", "running", "waiting") for t in store.list_tasks(batch="jobs")):
    Worker(app, burst=True, concurrency=2).run()
    time.sleep(0.01)  # real-sleep-ok: the holder runs in another process; look again soon
print(json.dumps(sent), flush=True)
app.close()
"""


@contextmanager
def _senders(script: str, argvs: list[list[str]]) -> Iterator[list[Any]]:
    """Start one process per argv; once all are ready, let them go together;
    yield what each printed last (JSON)."""
    children = [
        subprocess.Popen(
            [sys.executable, "-c", script, *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for argv in argvs
    ]
    try:
        for child in children:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready"
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        outputs = [child.communicate(timeout=600)[0] for child in children]
        assert [child.returncode for child in children] == [0] * len(children)
        yield [json.loads(out.strip().splitlines()[-1]) for out in outputs]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.communicate()


def test_a_thousand_debounced_events_from_four_processes_run_once_with_the_last_arguments(
    store_url: str, tmp_path: Path
) -> None:
    """4 processes of 250 events each of one key, all at once: one task; the answers'
    event counts are 1..1,000, each once (the commit order); run an hour past
    the window, the task runs once with the arguments of event 1,000."""
    with _senders(_DEBOUNCER, [[store_url, str(s), "250"] for s in range(4)]) as outputs:
        sent = [row for output in outputs for row in output]
    assert len({row[2] for row in sent}) == 1
    assert sorted(row[4] for row in sent) == list(range(1, 1001))
    assert sorted(row[3] for row in sent).count("new") == 1
    last = next(row for row in sent if row[4] == 1000)
    runs = tmp_path / "runs.jsonl"
    later = FakeClock(start=datetime.now(UTC) + timedelta(hours=2))
    with Cairn(store_url, clock=later) as app:

        @app.task(name="reindex")
        def reindex(ctx: Context, doc: str, sender: int, n: int) -> None:
            with runs.open("a") as out:
                out.write(json.dumps([sender, n]) + "\n")

        Worker(app, burst=True).run()
        task = app.store.get_task(last[2])
    assert runs.read_text().splitlines() == [json.dumps(last[:2])]
    assert task is not None
    assert (task.status, task.debounce_events) == ("completed", 1000)


class _Gauge:
    """How many tasks are inside the guarded function now, the most ever, and
    how many entered in all."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inside = 0
        self.most = 0
        self.entered = 0

    def enter(self) -> None:
        with self.lock:
            self.inside += 1
            self.entered += 1
            self.most = max(self.most, self.inside)

    def leave(self) -> None:
        with self.lock:
            self.inside -= 1


@contextmanager
def _gauge_server() -> Iterator[tuple[_Gauge, int]]:
    gauge = _Gauge()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            (gauge.enter if self.path == "/enter" else gauge.leave)()
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            """Quiet: the test reads the gauge, not the log."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield gauge, server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_a_singleton_key_raced_by_eight_processes_never_has_two_running(
    store_url: str,
) -> None:
    """8 processes each send 5 events of one singleton key (odd ones queue, even
    ones drop) and run workers meanwhile: the server never sees two tasks
    inside at once, every task made (new or queued) ran, and none is left."""
    with (
        _gauge_server() as (gauge, port),
        _senders(_SINGLETON, [[store_url, str(port), str(s), "5"] for s in range(8)]) as outputs,
    ):
        outcomes = [outcome for output in outputs for outcome in output]
    made = sum(outcome in ("new", "queued") for outcome in outcomes)
    assert gauge.most == 1
    assert gauge.entered == made
    with Cairn(store_url) as app:
        statuses = {t.status for t in admin(app.store).list_tasks(batch="jobs")}
    assert statuses == {"completed"}
