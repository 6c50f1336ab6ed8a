"""A PostgreSQL outage under ``ctx.map`` and under child tasks: no item and no
child runs twice, and no task changes hands.

A real ``cairn worker`` (two threads) runs two tasks of ``fanout_app.py`` on a
private PostgreSQL cluster (tests/pgcluster.py): ``mapped``, whose ``ctx.map``
has four items in flight on four threads of their own, and ``family``, whose
join runs its first child inline. A second worker idles beside it, looking for
work it could take over. Every item and child is one call to a server in this
test process, which logs each call as it arrives and holds its answer at a
gate. Once all five calls are in, the cluster is stopped (a fast shutdown),
the gate opens, so the five answers come back while the store is down and
their writes (the map's items sharing group commits, PostgreSQL's default) wait
for it; a few seconds later, far inside the default 30 s lease, the cluster is
started again. The batch finishes: the server saw each item and child called
exactly once, and neither worker resumed or took over a task.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import pytest

from cairn import Cairn
from tests.acceptance.fanout_app import CHILDREN, ITEMS, make_app
from tests.pgcluster import Cluster
from tests.servers import LocalServer, RequestHandler, wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
WORKER_APP = "tests.acceptance.fanout_app:app"
OUTAGE_SECONDS = 4  # far inside the default 30 s lease
START_TIMEOUT_SECONDS = 60
FINISH_TIMEOUT_SECONDS = 120


class GatedApi(LocalServer):
    """Logs every call on arrival (path and the caller's pid), and answers only
    once the gate is open."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self._calls: list[tuple[str, str, int]] = []

    @property
    def calls(self) -> list[tuple[str, str, int]]:
        """(task id, label, pid) of every call, in arrival order."""
        with self._lock:
            return list(self._calls)

    def answer(self, request: RequestHandler, method: str) -> None:
        request.read_body()
        _, _, task_id, label, pid = request.path.split("/")
        with self._lock:
            self._calls.append((unquote(task_id), label, int(pid)))
        self.gate.wait(FINISH_TIMEOUT_SECONDS)
        request.send_json(200, {"ok": True})


@pytest.fixture
def api() -> Iterator[GatedApi]:
    server = GatedApi()
    with server:
        try:
            yield server
        finally:
            server.gate.set()  # let every held answer go before the server stops


def start_worker(url: str, api: GatedApi, log: Path, concurrency: int) -> subprocess.Popen[bytes]:
    """``cairn worker --burst``: runs until nothing is left that it could run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env["CAIRN_TEST_API_URL"] = api.url
    command = [
        sys.executable, "-c", "from cairn.cli import main; main()", "worker", WORKER_APP,
        "--burst", f"--concurrency={concurrency}", "--idle-wait=0.2", f"--store={url}",
    ]  # fmt: skip
    with log.open("wb") as out:  # a file, not a pipe nobody reads
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def connected(url: str, name: str) -> bool:
    """Has the worker whose connections carry ``application_name`` ``name``
    opened its store and started listening (two connections)?"""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
        ).fetchall()
    return bool(rows[0][0] >= 2)


def outage_answering(cluster: Cluster, api: GatedApi) -> None:
    """Stop the cluster, open the gate (the held calls answer while the store is
    down), wait ``OUTAGE_SECONDS``, start the cluster again."""
    cluster.stop()
    try:
        api.gate.set()
        time.sleep(OUTAGE_SECONDS)  # real-sleep-ok: the outage itself is real time
    finally:
        cluster.start()


def _took_over(line: str) -> bool:
    return "resuming task" in line or "taking over task" in line


def _stop(processes: list[subprocess.Popen[bytes]]) -> list[int]:
    """Each worker's exit code (a worker still running after the deadline is
    killed, and its code is the kill's)."""
    codes = []
    for process in processes:
        try:
            codes.append(process.wait(FINISH_TIMEOUT_SECONDS))
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            codes.append(process.wait())
    return codes


@pytest.mark.timeout(240)
def test_an_outage_under_a_map_and_a_join_runs_no_item_or_child_twice(
    pg_cluster: Cluster, api: GatedApi, tmp_path: Path
) -> None:
    """The store goes down while a map's four items and a join's first child are
    each inside their call, and their answers come back during the outage. Once
    it is back, the batch completes: every item and child was called once, by
    the worker that started the task, and no task changed hands."""
    url = pg_cluster.create_database("cairn")
    with make_app(url) as app:
        app.enqueue("maps", app.registered("mapped"), [{"n": 0}])
        app.enqueue("families", app.registered("family"), [{"n": 0}])
    logs = [tmp_path / "busy.log", tmp_path / "idle.log"]
    workers = [start_worker(url, api, logs[0], concurrency=2)]
    try:
        in_flight = len(ITEMS) + 1  # the map's items and the first child
        started = wait_until(lambda: len(api.calls) >= in_flight, START_TIMEOUT_SECONDS, poll=0.02)
        assert started, logs[0].read_text(errors="replace")
        workers.append(start_worker(f"{url}?application_name=idle", api, logs[1], concurrency=1))
        listening = wait_until(lambda: connected(url, "idle"), START_TIMEOUT_SECONDS, poll=0.02)
        assert listening, logs[1].read_text(errors="replace")
        outage_answering(pg_cluster, api)
        codes = _stop(workers)
    finally:
        api.gate.set()
        _stop(workers)
    text = {log.name: log.read_text(errors="replace") for log in logs}
    assert codes == [0, 0], text

    calls = api.calls
    expected = {("maps/n=0", item) for item in ITEMS}
    expected |= {(f"families/n=0/{label}", label) for label in CHILDREN}
    assert Counter((task, label) for task, label, _ in calls) == dict.fromkeys(expected, 1), text
    moved = [line for log in text.values() for line in log.splitlines() if _took_over(line)]
    assert moved == [], f"tasks changed hands during a short outage: {moved}"
    assert "PostgreSQL connection lost" in text["busy.log"]
    with Cairn(url) as app:
        counts = {batch: dict(app.store.batch_counts(batch)) for batch in ("maps", "families")}
    assert counts == {"maps": {"completed": 1}, "families": {"completed": 1 + len(CHILDREN)}}
