"""Cancelling a running task, and per-task time limits: both stop a task at its
next step boundary, and neither can be swallowed by ``except Exception``.

Every test runs on each backend (``store_url``).
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from datetime import timedelta

import pytest

from cairn import Cairn, Context, Retry, TaskCancelled, TaskFailed
from cairn.clock import FakeClock
from cairn.store import admin
from tests.crashes import url as url  # a fixture: pytest finds it by this name

GATE_SECONDS = 30.0


def test_a_cancelled_task_stops_before_its_next_step_even_if_it_catches_everything(
    url: str, clock: FakeClock
) -> None:
    """The task is cancelled while it works between two steps; its next step's
    function is never called, although the task wraps it in ``except Exception``."""
    calls: Counter[str] = Counter()
    between = threading.Event()
    cancelled = threading.Event()
    # poll_interval=0: look for a cancel at every step boundary, so the test does
    # not depend on how much time passes between the cancel and the next step.
    app = Cairn(url, clock=clock, poll_interval=0.0)

    @app.task
    def agent(ctx: Context) -> str:
        ctx.step("plan", lambda: calls.update(["plan"]))
        between.set()
        assert cancelled.wait(GATE_SECONDS)  # working outside any step
        # The point: cairn's stop is not an Exception, so this cannot swallow it.
        with contextlib.suppress(Exception):
            ctx.step("charge", lambda: calls.update(["charge"]))
        ctx.step("report", lambda: calls.update(["report"]))
        return "done"

    outcome: list[BaseException] = []

    def run() -> None:
        try:
            app.run(agent, task_id="a")
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)

    with app:
        thread = threading.Thread(target=run)
        thread.start()
        assert between.wait(GATE_SECONDS)
        assert admin(app.store).cancel_task("a", clock.now())
        cancelled.set()
        thread.join(GATE_SECONDS)
        row = app.store.get_task("a")
    assert isinstance(outcome[0], TaskCancelled)
    assert calls == Counter({"plan": 1})
    assert row is not None
    assert row.status == "cancelled"


def test_a_task_past_its_max_duration_fails_at_a_step_boundary_and_is_not_retried(
    url: str, clock: FakeClock
) -> None:
    """With max_duration=30 min and steps of 10 min, the fourth step never starts:
    the task fails with TimeLimitExceeded recorded, its retry policy unused, and
    the agent's ``except Exception`` around the steps does not keep it going."""
    calls: list[int] = []
    app = Cairn(url, clock=clock, task_retry=Retry(attempts=3, initial_delay=0, jitter=0))

    def work(n: int) -> int:
        calls.append(n)
        clock.advance(600)
        return n

    @app.task(max_duration=timedelta(minutes=30))
    def long_job(ctx: Context) -> int:
        done = 0
        for n in range(6):
            try:
                done += ctx.step(f"chunk-{n}", work, n)
            except Exception:  # noqa: BLE001, S112 - an agent that swallows everything
                continue
        return done

    with app:
        with pytest.raises(TaskFailed, match="max_duration of 1800s") as raised:
            app.run(long_job, task_id="j")
        row = app.store.get_task("j")
    assert calls == [0, 1, 2]
    assert raised.value.error["type"] == "cairn.errors.TimeLimitExceeded"
    assert row is not None
    assert (row.status, row.attempts) == ("failed", 1)
