"""A dead worker's tasks are taken up first, not after the whole queue.

Worker A (two threads) takes two tasks of a 1,004-task batch and is SIGKILLed in
the middle of their second step. Worker B, started after the kill with one
thread, must run A's two tasks before any of the 1,002 pending ones: they were
under way, and someone may be waiting for them. Every step function appends a
line to a counts file as it ends (``worker_app``), so the order in which B ran
things is read outside the store. On SQLite and on PostgreSQL.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.acceptance.test_workers_postgres import (
    BATCH,
    Scene,
    enqueue,
    opened,
    read_counts,
    start_worker,
)
from tests.servers import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

TASKS = 1004
HELD_BY_A = 2
TIMEOUT_SECONDS = 90.0


@pytest.fixture(params=["sqlite", "postgres"])
def scene(request: pytest.FixtureRequest, tmp_path: Path) -> Scene:
    """A fresh store of each backend, with the gate directory the workers use."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'orphans.db'}"
    else:
        url = str(request.getfixturevalue("pg_url"))
    made = Scene(url, tmp_path)
    made.gate.mkdir()
    return made


def _kill_all(scene: Scene) -> None:
    for worker in scene.workers:
        if worker.process.poll() is None:
            worker.process.kill()
            worker.process.wait()


def test_a_sigkilled_workers_tasks_run_before_1000_pending_ones(scene: Scene) -> None:
    """A holds two tasks, blocked in step s2 (s1 recorded), and is SIGKILLed; B's
    first two tasks are A's two, resumed at s2 (s1 is not run again), while the
    other 1,002 tasks are still pending. The delay from the kill to each
    orphan's resumed step is printed. (B runs on after them until it is told to
    stop, so how many tasks are pending by then depends on the machine; what
    B ran first does not.)"""
    enqueue(scene.url, TASKS)
    try:
        a = start_worker(scene, "a", concurrency=HELD_BY_A, block_at="s2")
        assert wait_until(
            lambda: sum(line.pid == a.pid for line in read_counts(scene.counts)) == HELD_BY_A,
            TIMEOUT_SECONDS,
            poll=0.02,
        ), a.tail()
        assert wait_until(lambda: scene.blocked(a.pid), TIMEOUT_SECONDS, poll=0.02)
        orphans = [line.task_id for line in read_counts(scene.counts)]
        a.process.send_signal(signal.SIGKILL)
        a.process.wait()
        killed_at = time.time()

        b = start_worker(scene, "b", concurrency=1)

        def orphans_done() -> bool:
            with opened(scene.url) as store:
                return all(
                    (task := store.get_task(t)) is not None and task.status == "completed"
                    for t in orphans
                )

        assert wait_until(orphans_done, TIMEOUT_SECONDS, poll=0.05), b.tail()
        b.process.send_signal(signal.SIGTERM)  # finish the task in hand, then stop
        b.finish()
    finally:
        _kill_all(scene)

    by_b = [line for line in read_counts(scene.counts) if line.pid == b.pid]
    first_tasks = list(dict.fromkeys(line.task_id for line in by_b))[:HELD_BY_A]
    assert sorted(first_tasks) == sorted(orphans), (first_tasks, orphans, b.tail())
    resumed = [(line.task_id, line.step) for line in by_b if line.task_id in orphans]
    assert all(step != "s1" for _, step in resumed), "a recorded step ran again"
    with opened(scene.url) as store:
        counts = dict(store.batch_counts(BATCH))
        delays = []
        for task_id in orphans:
            history = store.load_history(task_id)
            s2 = next(r for r in history.values() if r.name == "s2")
            delays.append(s2.finished_at.timestamp() - killed_at)
    print(f"orphan pickup: {', '.join(f'{d:.3f}s' for d in delays)} after the kill; {counts}")
