"""``cairn worker``'s stop signals: the handler only notes them, the main loop acts.

A signal handler runs in the main thread between any two bytecodes. The worker's
main thread sets its wake-up ``Event`` whenever new work is announced, and used
to call the same ``Event`` from its SIGTERM handler: a SIGTERM landing while the
main thread was inside ``Event.set`` waited forever for the lock that very
thread held, and the worker never stopped (seen once in CI, three workers
ticking a schedule). The end-to-end SIGTERM behaviour is in the acceptance
tests; these check the handler and the loop's part.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from cairn import Cairn, Context
from cairn.worker import Worker


@pytest.fixture
def worker(app: Cairn) -> Iterator[Worker]:
    """A worker for an app with one task, its signal handlers installed (and the
    previous handlers put back after the test)."""

    @app.task
    def job(ctx: Context) -> int:
        return 1

    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    made = Worker(app, concurrency=1)
    made.install_signal_handlers()
    yield made
    for number, handler in previous.items():
        signal.signal(number, handler)


@pytest.mark.timeout(10)
def test_the_handler_takes_no_lock_the_interrupted_code_may_hold(worker: Worker) -> None:
    """Called while the main thread holds a lock the worker's own code takes (here
    the worker's lock, which the old handler took to count running tasks; the
    wake-up Event's is the same case), the SIGTERM handler returns at once: it
    only notes the signal."""
    handler = signal.getsignal(signal.SIGTERM)
    assert callable(handler)
    with worker._lock:  # as if interrupted while holding it
        handler(signal.SIGTERM, None)
    assert not worker._stopping.is_set()  # nothing acted on yet


def test_the_main_loop_stops_on_the_first_signal_and_hands_back_on_the_second(
    worker: Worker, caplog: pytest.LogCaptureFixture
) -> None:
    """The first noted signal makes the worker stop claiming and say so; the
    second hands the running tasks back and exits with code 1."""
    handler = signal.getsignal(signal.SIGTERM)
    assert callable(handler)
    handler(signal.SIGTERM, None)
    worker._act_on_signals()
    assert worker._stopping.is_set()
    assert "SIGTERM received; finishing 0 running task(s)" in caplog.text
    handler(signal.SIGINT, None)
    with pytest.raises(SystemExit) as exited:
        worker._act_on_signals()
    assert exited.value.code == 1
    assert "handing running tasks back and stopping" in caplog.text
