"""``app.result(task_id, timeout=…)``: wait for a task another process runs.

Where ``app.run`` of a task that a live process holds raises ``TaskBusy``,
``app.result`` waits for that task to end and returns its result, or raises its
error, as DBOS's ``get_result`` does. It changes nothing in the store.

The tests on every backend are in ``store/test_result.py``.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from cairn import (
    Cairn,
    TaskBusy,
)
from tests.crashes import ELSEWHERE


def test_result_waits_for_a_task_another_runner_holds(tmp_path: Path) -> None:
    """A runner with another owner holds the task inside a step: app.run here
    raises TaskBusy, and app.result waits (polling the store) until that runner
    finishes, then returns the recorded result."""
    url = f"sqlite:///{tmp_path / 'cairn.db'}"
    runner = Cairn(url, poll_interval=0.01)
    runner.owner = ELSEWHERE
    waiter = Cairn(url, poll_interval=0.01)
    inside, release = threading.Event(), threading.Event()

    def slow() -> int:
        inside.set()
        assert release.wait(30)
        return 42

    for app in (runner, waiter):
        app.task(name="answer")(lambda ctx: ctx.step("slow", slow))
    results: list[object] = []
    thread = threading.Thread(
        target=lambda: results.append(runner.run(runner.registered("answer"), task_id="q"))
    )
    with runner, waiter:
        thread.start()
        assert inside.wait(30)
        with pytest.raises(TaskBusy, match=r"app\.result\(\) waits"):
            waiter.run(waiter.registered("answer"), task_id="q")
        answers: list[object] = []
        asking = threading.Thread(target=lambda: answers.append(waiter.result("q", timeout=60)))
        asking.start()
        release.set()
        asking.join(60)
        thread.join(60)
    assert answers == [42]
    assert results == [42]
