"""``ctx.before_send()`` and ``cairn.before_send()``: the guard an operation's
function calls right before its request leaves.

The clock is a ``FakeClock``: "paused past its lease" is the clock moved on
inside the function, and "another worker took the task" is the task's fence
moved in the store, as a takeover moves it. Sends are counted in a list the
function appends to only after the guard let it through.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import cairn
from cairn import Cairn, Context, LeaseLost
from cairn.clock import FakeClock

LEASE = 30.0


def _app(tmp_path: Path, clock: FakeClock) -> Cairn:
    return Cairn(f"sqlite:///{tmp_path / 'guard.db'}", clock=clock, lease=LEASE)


def test_a_fresh_lease_lets_the_request_go(tmp_path: Path) -> None:
    """With the lease confirmed moments ago, both guards return and the request
    is sent once; a second run of the task answers from the record."""
    clock = FakeClock()
    app = _app(tmp_path, clock)
    sent: list[str] = []

    @app.task
    def pay(ctx: Context) -> str:
        def charge(key: str) -> str:
            ctx.before_send()
            cairn.before_send()
            sent.append(key)
            return "ch_1"

        return ctx.once("pay/1", charge)

    assert app.run(pay, task_id="t") == "ch_1"
    assert app.run(pay, task_id="t2") == "ch_1"  # the key answers; nothing sent
    assert sent == ["pay/1"]
    app.close()


def test_a_stale_lease_still_ours_is_renewed_and_the_request_goes(tmp_path: Path) -> None:
    """Paused inside the function for most of a lease, but nobody took the task:
    the guard renews the lease (fenced) and lets the request go."""
    clock = FakeClock()
    app = _app(tmp_path, clock)
    sent: list[str] = []

    @app.task
    def pay(ctx: Context) -> str:
        def charge(key: str) -> str:
            clock.advance(LEASE * 0.9)  # building the request took most of a lease
            cairn.before_send()
            sent.append(key)
            return "ch_1"

        return ctx.once("pay/1", charge)

    assert app.run(pay, task_id="t") == "ch_1"
    assert sent == ["pay/1"]
    app.close()


def test_a_task_taken_while_paused_in_the_function_sends_nothing(tmp_path: Path) -> None:
    """Paused inside the function past its lease, and another worker took the
    task meanwhile (its fence moved): the guard raises LeaseLost, and the
    request is never sent."""
    clock = FakeClock()
    app = _app(tmp_path, clock)
    sent: list[str] = []

    @app.task
    def pay(ctx: Context) -> str:
        def charge(key: str) -> str:
            clock.advance(LEASE * 3)
            with sqlite3.connect(tmp_path / "guard.db") as taker:
                taker.execute("UPDATE tasks SET fence = fence + 1 WHERE id = 't'")
            ctx.before_send()
            sent.append(key)
            return "ch_1"

        return ctx.once("pay/1", charge)

    with pytest.raises(LeaseLost):
        app.run(pay, task_id="t")
    assert sent == []
    app.close()


def test_the_module_guard_does_nothing_outside_an_operation() -> None:
    """cairn.before_send() outside an operation's function (a unit test calling
    the function directly) returns without a store or a task."""
    cairn.before_send()
