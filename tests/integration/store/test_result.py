"""``app.result(task_id, timeout=…)``: wait for a task another process runs.

Where ``app.run`` of a task that a live process holds raises ``TaskBusy``,
``app.result`` waits for that task to end and returns its result, or raises its
error, as DBOS's ``get_result`` does. It changes nothing in the store.

Every test here runs on each backend (the conformance suite).
"""

from __future__ import annotations

import asyncio

import pytest

from cairn import (
    Cairn,
    Context,
    ResultTimeout,
    TaskCancelled,
    TaskFailed,
    UnknownTask,
)
from cairn.clock import FakeClock
from cairn.store import admin
from cairn.store.records import NewTask
from tests.crashes import ELSEWHERE


def test_result_of_finished_tasks_and_of_no_task(any_app: Cairn) -> None:
    """A completed task gives its result at once; a failed one raises TaskFailed
    with the recorded error; a cancelled one TaskCancelled; an unknown id
    UnknownTask."""

    @any_app.task
    def done(ctx: Context, n: int) -> int:
        return n * 2

    @any_app.task
    def broken(ctx: Context) -> None:
        raise KeyError("missing")

    assert any_app.run(done, task_id="done", n=21) == 42
    assert any_app.result("done") == 42
    with pytest.raises(TaskFailed):
        any_app.run(broken, task_id="broken")
    with pytest.raises(TaskFailed) as failed:
        any_app.result("broken")
    assert failed.value.error["type"] == "builtins.KeyError"
    any_app.store.create_task(NewTask("later", "done", '{"n": 1}', "json"), any_app.clock.now())
    assert admin(any_app.store).cancel_task("later", any_app.clock.now())
    with pytest.raises(TaskCancelled):
        any_app.result("later")
    with pytest.raises(UnknownTask, match="no task 'nope'"):
        any_app.result("nope")


def test_result_gives_up_after_its_timeout_and_changes_nothing(
    any_app: Cairn, clock: FakeClock
) -> None:
    """A task that stays pending (no process runs it) makes app.result raise
    ResultTimeout (also a TimeoutError) after the timeout, by the app's clock,
    naming the task and its status; the task is left as it was."""
    any_app.store.create_task(NewTask("idle", "job", "{}", "json"), clock.now())
    before = any_app.store.get_task("idle")
    with pytest.raises(ResultTimeout, match="'idle' is still pending after 5s") as waited:
        any_app.result("idle", timeout=5)
    assert isinstance(waited.value, TimeoutError)
    assert sum(clock.slept) == pytest.approx(5)
    assert any_app.store.get_task("idle") == before
    with pytest.raises(ValueError, match="timeout must be zero or positive"):
        any_app.result("idle", timeout=-1)


def test_aresult_waits_in_an_event_loop(any_app: Cairn, clock: FakeClock) -> None:
    """aresult is result for callers inside an event loop: a task finished by
    another runner while it waits is returned."""
    any_app.store.create_task(NewTask("t", "job", "{}", "json"), clock.now())
    claimed = any_app.store.claim_task("t", 0, ELSEWHERE, clock.now(), clock.now())
    assert claimed is not None

    async def wait_and_finish() -> object:
        waiting = asyncio.ensure_future(any_app.aresult("t", timeout=60))
        await asyncio.sleep(0)  # real-sleep-ok: yields to the event loop, waits no time
        assert any_app.store.finish_task("t", claimed.fence, "completed", "7", None, clock.now())
        return await waiting

    assert asyncio.run(wait_and_finish()) == 7
