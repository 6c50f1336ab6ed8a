"""A high-priority task enqueued behind 100,000 pending ones is claimed next.

A running worker (one thread) works through a batch of 100,000 five-step tasks
of priority 0. A task of priority 10 is enqueued meanwhile: it is the next task
the worker starts once the one in hand ends, at worst the one after if the
worker had claimed it just before the enqueue committed. Which task the worker
started when is read outside the store (every step function appends a line to
a counts file, ``worker_app``), so nothing here depends on the machine's speed.
On SQLite and on PostgreSQL.
"""

from __future__ import annotations

import signal

import pytest

# A fresh store of each backend (a fixture, found by name).
from tests.acceptance.test_orphans_first import scene as scene
from tests.acceptance.test_workers_postgres import (
    Scene,
    enqueue,
    opened,
    read_counts,
    start_worker,
)
from tests.acceptance.worker_app import make_app
from tests.servers import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

PENDING = 100_000
TIMEOUT_SECONDS = 120.0


def _started(scene: Scene) -> list[str]:
    """The tasks the worker started, in order (each task's first line)."""
    return list(dict.fromkeys(line.task_id for line in read_counts(scene.counts)))


@pytest.mark.timeout(600)
def test_a_priority_10_task_is_claimed_next_behind_100000_pending(scene: Scene) -> None:
    """The worker has started a few of the 100,000; the urgent task, enqueued
    then, is the next or the one after among the tasks it starts."""
    enqueue(scene.url, PENDING)
    worker = start_worker(scene, "w", concurrency=1, step_ms=5)
    try:
        assert wait_until(lambda: len(_started(scene)) >= 3, TIMEOUT_SECONDS, poll=0.02), (
            worker.tail()
        )
        app, task = make_app(scene.url)
        with app:
            app.enqueue("urgent", task, [{"n": 0}], priority=10)
        started_before = len(_started(scene))
        assert wait_until(lambda: "urgent/n=0" in _started(scene), TIMEOUT_SECONDS, poll=0.02), (
            worker.tail()
        )
        worker.process.send_signal(signal.SIGTERM)  # finish the task in hand, then stop
        worker.finish()
    finally:
        if worker.process.poll() is None:
            worker.process.kill()
            worker.process.wait()
    position = _started(scene).index("urgent/n=0")
    assert position <= started_before + 1, (position, started_before, _started(scene)[:12])
    with opened(scene.url) as store:
        urgent = store.get_task("urgent/n=0")
        assert urgent is not None
        assert urgent.priority == 10
        assert urgent.status == "completed"
