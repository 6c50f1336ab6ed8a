"""A short PostgreSQL outage must not run any step twice.

Three real ``cairn worker`` processes (six threads each) run 11 tasks of six
steps on a private PostgreSQL cluster (tests/pgcluster.py), with cairn's
default 30 s lease. As in the issue, two workers hold all 11 tasks (6 and 5)
and the third is idle, polling for work it could take over: they are started
one after the other so that this is so. Each step is one call to an HTTP
server in this test process that holds its answer for 2 s, and the server
counts every call per (task, step) as it arrives: that count, not cairn's own record, says whether a
step ran twice. Once every task is inside a step, the cluster is stopped (a
fast shutdown) for 15 s or 20 s, shorter than the lease, then started again,
and the batch is left to finish.

workers.md promises that an outage shorter than the lease moves no task: the
workers reconnect and renew their leases as soon as the server is back, and no
worker takes over a task whose owner is alive. So every step runs exactly once
and no worker logs that it resumed or took over another's task. The time from
the server's first accepted connection to each worker's next step call (which
follows its first write) is printed.
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
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.acceptance.outage_app import STEPS, make_app
from tests.pgcluster import Cluster
from tests.servers import ApiServer, wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
WORKER_APP = "tests.acceptance.outage_app:app"
BATCH = "outage"
TASKS = 11
WORKERS = 3
CONCURRENCY = 6  # the first worker takes 6 tasks, the second 5, the third none
STEP_SECONDS = 2.0  # shorter than the outage: every task waits on a write when it ends
START_TIMEOUT_SECONDS = 60
FINISH_TIMEOUT_SECONDS = 120


@dataclass(frozen=True)
class Call:
    """One step call as the server saw it."""

    task_id: str
    step: str
    pid: int
    at: float  # the test process's time.monotonic() on arrival


def calls(server: ApiServer) -> list[Call]:
    found = []
    for arrival in server.arrivals:
        _, kind, task_id, step, pid = arrival.path.split("/")
        assert kind == "step", arrival
        found.append(Call(unquote(task_id), step, int(pid), arrival.at))
    return found


@dataclass
class Worker:
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def tail(self, lines: int = 40) -> str:
        """The end of the log, for failure messages."""
        return "\n".join(self.log().splitlines()[-lines:])


def start_worker(url: str, api: str, log_path: Path) -> Worker:
    """``cairn worker --burst``: runs until nothing is left that it could run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env["CAIRN_TEST_API_URL"] = api
    command = [
        sys.executable,
        "-c",
        "from cairn.cli import main; main()",
        "worker",
        WORKER_APP,
        "--burst",
        f"--concurrency={CONCURRENCY}",
        "--idle-wait=0.2",
        f"--store={url}",
    ]
    # A file, not a pipe: a pipe nobody reads fills up and blocks the worker.
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT
        )
    return Worker(process, log_path)


def running(api: ApiServer, url: str, name: str, tasks_in_a_step: int) -> bool:
    """Has worker ``name`` opened its store and started listening (two
    connections with its application_name), and have that many tasks made
    their first call?"""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
        ).fetchall()
    return rows[0][0] >= 2 and len({c.task_id for c in calls(api)}) == tasks_in_a_step


def _took_over(line: str) -> bool:
    """A worker's log line saying it took a task from another owner."""
    return "resuming task" in line or "taking over task" in line


@pytest.fixture
def api() -> Iterator[ApiServer]:
    with ApiServer(hold=STEP_SECONDS) as server:
        yield server


def outage(cluster: Cluster, seconds: float) -> tuple[float, float]:
    """Stop the cluster for ``seconds``, start it; when the stop began and when
    the server first accepted a connection again (``time.monotonic()``)."""
    stopped_at = time.monotonic()
    cluster.stop()
    try:
        time.sleep(seconds)  # real-sleep-ok: the outage itself is real time
    finally:
        starting = threading.Thread(target=cluster.start)
        starting.start()
        accepted_at = cluster.wait_accepting()
        starting.join(timeout=60)
    return stopped_at, accepted_at


def report(seconds: float, stopped: float, accepted: float, found: list[Call]) -> str:
    """Per worker: the delay from the server's return to its first step call
    after it (the call comes right after the worker's first write lands)."""
    first_after: dict[int, float] = {}
    for call in sorted(found, key=lambda c: c.at):
        if call.at >= accepted:
            first_after.setdefault(call.pid, call.at - accepted)
    delays = ", ".join(f"{d * 1000:.0f} ms" for d in sorted(first_after.values()))
    return (
        f"outage {seconds:g}s (server down {accepted - stopped:.1f}s from stop to first "
        f"accepted connection); server back -> each worker's first step call: {delays}"
    )


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seconds", [15, 20])
def test_an_outage_shorter_than_the_lease_runs_no_step_twice(
    seconds: float, pg_cluster: Cluster, api: ApiServer, tmp_path: Path
) -> None:
    """PostgreSQL stopped for ``seconds`` (15 s or 20 s; the lease is 30 s)
    while 11 tasks on three workers are each inside a step: once it is back,
    every worker carries on with its own tasks, no task changes hands, and the
    batch completes with every step called exactly once."""
    url = pg_cluster.create_database("cairn")
    app, task = make_app(url)
    with app:
        app.enqueue(BATCH, task, [{"n": n} for n in range(TASKS)])
    task_ids = [f"{BATCH}/n={n}" for n in range(TASKS)]
    workers: list[Worker] = []
    try:
        # Two busy workers (6 tasks, then the other 5), then an idle one.
        for i, in_a_step in enumerate([CONCURRENCY, TASKS, TASKS]):
            name = f"outage-worker-{i}"
            store = f"{url}?application_name={name}"
            workers.append(start_worker(store, api.url, tmp_path / f"{name}.log"))
            ready = partial(running, api, url, name, in_a_step)
            started = wait_until(ready, START_TIMEOUT_SECONDS, poll=0.02)
            assert started, "\n".join(w.tail() for w in workers)
        stopped, accepted = outage(pg_cluster, seconds)
        codes = [w.process.wait(FINISH_TIMEOUT_SECONDS) for w in workers]
    finally:
        for worker in workers:
            if worker.process.poll() is None:
                worker.process.send_signal(signal.SIGKILL)
                worker.process.wait()
    found = calls(api)
    logs = "\n".join(f"--- worker {i} ---\n{w.tail()}" for i, w in enumerate(workers))
    print("\n" + report(seconds, stopped, accepted, found))

    assert codes == [0] * WORKERS, logs
    twice = {key: n for key, n in Counter((c.task_id, c.step) for c in found).items() if n > 1}
    assert twice == {}, f"steps called more than once: {twice}\n{logs}"
    assert sorted(Counter(c.task_id for c in found).items()) == sorted(
        (task_id, len(STEPS)) for task_id in task_ids
    )
    moved = [line for w in workers for line in w.log().splitlines() if _took_over(line)]
    assert moved == [], f"tasks changed hands during an outage shorter than the lease: {moved}"
    assert all("PostgreSQL connection lost" in w.log() for w in workers), logs
    with make_app(url)[0] as check:
        assert dict(check.store.batch_counts(BATCH)) == {"completed": TASKS}
