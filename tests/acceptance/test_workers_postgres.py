"""``cairn worker`` processes on PostgreSQL: races, kills, freezes, a full pool, outages.

Every worker is a real ``cairn worker tests.acceptance.worker_app:app``
subprocess. Its step functions append ``task_id step pid`` to a counts file
when they run to their end, so these tests count real runs outside the store;
each step's recorded output is ``step@pid``, so the store shows which process
recorded it. Waits are polls with deadlines on real processes.

The server restart test stops and starts a private PostgreSQL cluster of its
own (tests/pgcluster.py), never the shared server other tests use.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cairn.codec import codec_for
from cairn.store import Store, open_store
from tests.acceptance.worker_app import STEPS, make_app
from tests.pgcluster import Cluster
from tests.servers import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]
# A private PostgreSQL cluster a test may stop and start (never the shared server).

ROOT = Path(__file__).resolve().parents[2]
WORKER_APP = "tests.acceptance.worker_app:app"
BATCH = "workers"
RUN_TIMEOUT_SECONDS = 90
BLOCK_TIMEOUT_SECONDS = 30
SHORT_LEASE_SECONDS = 2
# reconnect_timeout=2 from the first failed write, with room for a slow machine
# (the worker then stops its other threads and exits).
UNREACHABLE_DEADLINE_SECONDS = 30


# -- the scene: a store, a counts file, a gate, and the workers' logs -------------------
@dataclass
class Scene:
    url: str
    dir: Path
    workers: list[Worker] = field(default_factory=list)

    @property
    def counts(self) -> Path:
        return self.dir / "counts.txt"

    @property
    def gate(self) -> Path:
        return self.dir / "gate"

    def blocked(self, pid: int) -> bool:
        return (self.gate / f"blocked-{pid}").exists()

    def release(self) -> None:
        (self.gate / "release").touch()


@dataclass
class Worker:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def tail(self, lines: int = 30) -> str:
        """The end of the log, for failure messages."""
        return "\n".join(self.log().splitlines()[-lines:])

    def finish(self, timeout: float = RUN_TIMEOUT_SECONDS) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"worker {self.name} did not finish in {timeout}s:\n{self.tail()}")


@dataclass(frozen=True)
class CountLine:
    task_id: str
    step: str
    pid: int


@contextmanager
def staged(url: str, directory: Path) -> Iterator[Scene]:
    """A scene on the store at ``url``; every worker started in it is killed at the end."""
    found = Scene(url, directory)
    found.gate.mkdir()
    try:
        yield found
    finally:
        for worker in found.workers:
            if worker.process.poll() is None:
                worker.process.send_signal(signal.SIGCONT)  # a frozen one cannot die otherwise
                worker.process.kill()
                worker.process.wait()


@pytest.fixture
def scene(pg_url: str, tmp_path: Path) -> Iterator[Scene]:
    """A fresh PostgreSQL store on the shared server."""
    with staged(pg_url, tmp_path) as found:
        yield found


@pytest.fixture
def cluster_scene(pg_cluster: Cluster, tmp_path: Path) -> Iterator[tuple[Scene, Cluster]]:
    """A fresh PostgreSQL store on a private cluster, which the test may stop and
    start; the workers are killed before the cluster is dropped."""
    with staged(pg_cluster.create_database("cairn"), tmp_path) as found:
        yield found, pg_cluster


def start_worker(
    scene: Scene,
    name: str,
    *,
    concurrency: int = 2,
    lease: float | None = None,
    block_at: str | None = None,
    step_ms: float = 0,
    store: str | None = None,
) -> Worker:
    """``cairn worker --burst``: runs until nothing is left that it could run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env |= {
        "CAIRN_TEST_COUNTS": str(scene.counts),
        "CAIRN_TEST_GATE_DIR": str(scene.gate),
        "CAIRN_TEST_STEP_MS": str(step_ms),
    }
    if lease is not None:
        env["CAIRN_TEST_LEASE"] = str(lease)
    if block_at is not None:
        env["CAIRN_TEST_BLOCK_AT"] = block_at
    command = [
        sys.executable,
        "-c",
        "from cairn.cli import main; main()",
        "worker",
        WORKER_APP,
        "--burst",
        f"--concurrency={concurrency}",
        "--idle-wait=0.2",
        f"--store={store or scene.url}",
    ]
    log_path = scene.dir / f"worker-{name}.log"
    # The log goes to a file, not a pipe: a pipe nobody reads fills up and
    # blocks a chatty worker.
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT
        )
    worker = Worker(name, process, log_path)
    scene.workers.append(worker)
    return worker


def finish_all(workers: list[Worker]) -> None:
    for worker in workers:
        code = worker.finish()
        assert code == 0, f"worker {worker.name} exited {code}:\n{worker.tail()}"


# -- reading what happened -------------------------------------------------------------
def enqueue(url: str, tasks: int) -> list[str]:
    """Add ``tasks`` five-step tasks to the batch; returns their ids."""
    app, task = make_app(url)
    with app:
        app.enqueue(BATCH, task, [{"n": n} for n in range(tasks)])
    return [f"{BATCH}/n={n}" for n in range(tasks)]


def read_counts(path: Path) -> list[CountLine]:
    if not path.exists():
        return []
    lines = []
    for text in path.read_text().splitlines():
        task_id, step, pid = text.split(" ")
        lines.append(CountLine(task_id, step, int(pid)))
    return lines


def runs_per_step(lines: list[CountLine]) -> Counter[tuple[str, str]]:
    return Counter((line.task_id, line.step) for line in lines)


def every_step_once(task_ids: list[str]) -> Counter[tuple[str, str]]:
    return Counter({(task_id, step): 1 for task_id in task_ids for step in STEPS})


@contextmanager
def opened(url: str) -> Iterator[Store]:
    store = open_store(url)
    try:
        yield store
    finally:
        store.close()


def recorded_pids(store: Store, task_id: str) -> dict[str, int]:
    """Step name -> the pid in its recorded output (``step@pid``)."""
    codec = codec_for("json")
    pids = {}
    for record in store.load_history(task_id).values():
        step, pid = str(codec.decode(record.output or "null")).split("@")
        assert step == record.name
        pids[record.name] = int(pid)
    return pids


def assert_batch_completed_once(scene: Scene, task_ids: list[str]) -> None:
    """Every task completed; every step ran exactly once, by the process that
    recorded it."""
    lines = read_counts(scene.counts)
    assert runs_per_step(lines) == every_step_once(task_ids)
    ran_by = {(line.task_id, line.step): line.pid for line in lines}
    with opened(scene.url) as store:
        assert dict(store.batch_counts(BATCH)) == {"completed": len(task_ids)}
        for task_id in task_ids:
            recorded = recorded_pids(store, task_id)
            assert recorded == {step: ran_by[task_id, step] for step in STEPS}


# -- the tests -----------------------------------------------------------------------------
def test_four_workers_race_over_a_batch_and_every_step_runs_exactly_once(scene: Scene) -> None:
    """Four worker processes (two threads each) drain 1,000 tasks of five steps:
    every step function runs exactly once, every task completes, and the work
    is spread over more than one worker."""
    task_ids = enqueue(scene.url, 1000)
    workers = [start_worker(scene, f"w{i}") for i in range(4)]
    finish_all(workers)
    assert_batch_completed_once(scene, task_ids)
    pids = {line.pid for line in read_counts(scene.counts)}
    assert pids <= {worker.pid for worker in workers}
    assert len(pids) > 1, "one worker did all the work: the race never happened"


def test_task_of_a_sigkilled_worker_is_finished_by_another_without_repeating_steps(
    scene: Scene,
) -> None:
    """A worker SIGKILLed inside step s3 leaves its task running; a second worker
    takes it over (at once on the same host: the owner pid is gone), replays
    s1 and s2 from the store without running them, and runs s3 to s5."""
    [task_id] = enqueue(scene.url, 1)
    first = start_worker(scene, "a", lease=SHORT_LEASE_SECONDS, block_at="s3")
    assert wait_until(lambda: scene.blocked(first.pid), BLOCK_TIMEOUT_SECONDS), first.tail()
    first.process.kill()
    assert first.finish() == -signal.SIGKILL
    scene.release()

    second = start_worker(scene, "b")
    finish_all([second])

    assert "resuming task" in second.log()
    lines = read_counts(scene.counts)
    ran_by = {(line.task_id, line.step): line.pid for line in lines}
    assert runs_per_step(lines) == every_step_once([task_id])  # s3 died before its line
    assert [ran_by[task_id, step] for step in STEPS] == [first.pid] * 2 + [second.pid] * 3
    with opened(scene.url) as store:
        assert dict(store.batch_counts(BATCH)) == {"completed": 1}
        assert recorded_pids(store, task_id) == {step: ran_by[task_id, step] for step in STEPS}


def test_worker_frozen_past_its_lease_gets_lease_lost_and_records_nothing(scene: Scene) -> None:
    """A worker SIGSTOPped inside step s2 (its heartbeat frozen with it) loses
    its 2 s lease; another worker takes the task over and completes it. Resumed
    with SIGCONT, the frozen worker finishes s2's function, but its write is
    refused (LeaseLost): it logs that it no longer holds the lease, records
    nothing, runs no further step, and the task completes once, with the
    second worker's history."""
    [task_id] = enqueue(scene.url, 1)
    frozen = start_worker(scene, "a", concurrency=1, lease=SHORT_LEASE_SECONDS, block_at="s2")
    assert wait_until(lambda: scene.blocked(frozen.pid), BLOCK_TIMEOUT_SECONDS), frozen.tail()
    frozen.process.send_signal(signal.SIGSTOP)
    try:
        scene.release()  # seen by the frozen worker only once it runs again
        # real-sleep-ok: a real frozen process must outlive its lease, so the
        # other worker's wait for the expiry is real too.
        taker = start_worker(scene, "b")
        finish_all([taker])
    finally:
        frozen.process.send_signal(signal.SIGCONT)
    finish_all([frozen])

    assert "no longer holds its lease" in frozen.log()
    assert "0 completed, 0 failed, 1 lost" in frozen.log()
    assert "taking over task" in taker.log()
    by_step: dict[str, list[int]] = {step: [] for step in STEPS}
    for line in read_counts(scene.counts):
        by_step[line.step].append(line.pid)
    # s2's function ran twice: in the taker, then in the frozen worker once it
    # resumed (its result then refused). Nothing else ran twice.
    assert by_step == {
        "s1": [frozen.pid],
        "s2": [taker.pid, frozen.pid],
        "s3": [taker.pid],
        "s4": [taker.pid],
        "s5": [taker.pid],
    }
    with opened(scene.url) as store:
        task = store.get_task(task_id)
        assert task is not None
        assert task.status == "completed"
        assert recorded_pids(store, task_id) == {
            "s1": frozen.pid,
            "s2": taker.pid,
            "s3": taker.pid,
            "s4": taker.pid,
            "s5": taker.pid,
        }


def test_exhausted_connection_pool_makes_a_worker_wait_with_a_log_line(scene: Scene) -> None:
    """With ``?pool_size=1`` and four worker threads, threads that cannot get a
    connection wait and say so in the log ("connections are in use"); they do
    not crash, and the batch completes with every step once. The test locks
    the steps table: the first thread to read a history holds the only
    connection until the lock goes, and the next thread's claim waits for it."""
    import psycopg

    task_ids = enqueue(scene.url, 20)
    with psycopg.connect(scene.url) as blocker:
        blocker.execute("LOCK TABLE cairn.steps IN ACCESS EXCLUSIVE MODE")
        worker = start_worker(scene, "a", concurrency=4, store=f"{scene.url}?pool_size=1")
        waited = wait_until(lambda: "connections are in use" in worker.log(), 30, poll=0.05)
        blocker.rollback()
    assert waited, worker.tail()
    finish_all([worker])
    assert_batch_completed_once(scene, task_ids)


@contextmanager
def refusing_connections(url: str) -> Iterator[None]:
    """The database refuses new connections and its open ones are cut: an
    outage of this one database, which leaves the rest of the server alone."""
    import psycopg

    from tests.conftest import postgres_admin_url

    name = url.rsplit("/", 1)[-1].split("?")[0]
    with psycopg.connect(postgres_admin_url(), autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
        try:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
            yield
        finally:
            admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")


def test_worker_stops_with_an_error_when_its_store_stays_unreachable(scene: Scene) -> None:
    """With ``?reconnect_timeout=2``, a worker whose database stays unreachable
    for longer gives up: it exits non-zero and its log says PostgreSQL was lost
    (not that its connection pool is busy). Its task stays running under a
    dead pid, for the next worker to take over."""
    enqueue(scene.url, 1)
    worker = start_worker(scene, "a", block_at="s2", store=f"{scene.url}?reconnect_timeout=2")
    assert wait_until(lambda: scene.blocked(worker.pid), BLOCK_TIMEOUT_SECONDS), worker.tail()
    with refusing_connections(scene.url):
        scene.release()  # s2 ends and its write meets the outage
        try:
            code = worker.process.wait(UNREACHABLE_DEADLINE_SECONDS)
        except subprocess.TimeoutExpired:
            code = None
        during_outage = worker.log()
    assert code is not None, f"the worker still waits after the deadline:\n{worker.tail()}"
    assert code != 0, worker.tail()
    assert "lost PostgreSQL" in during_outage
    assert "connections are in use" not in during_outage


# -- restarting the server (a private cluster) -------------------------------------------------
def test_batch_completes_with_every_step_once_across_a_postgres_restart(
    cluster_scene: tuple[Scene, Cluster],
) -> None:
    """Two workers run 200 tasks of five 5 ms steps; partway through, the
    private PostgreSQL cluster is stopped for 2 s and started again. The workers
    log the lost connection, reconnect, and the batch completes with every step
    function run exactly once."""
    scene, cluster = cluster_scene
    task_ids = enqueue(scene.url, 200)
    workers = [start_worker(scene, f"w{i}", step_ms=5) for i in range(2)]
    try:
        assert wait_until(lambda: len(read_counts(scene.counts)) >= 150, 60, poll=0.02)
        cluster.stop()
        time.sleep(2)  # real-sleep-ok: the server stays down while workers try to write
        cluster.start()
    finally:
        if not cluster.accepts():
            cluster.start()
    finish_all(workers)
    assert any("PostgreSQL connection lost" in worker.log() for worker in workers)
    assert_batch_completed_once(scene, task_ids)
