"""``ctx.once``: a side effect runs at most once per key, and its result is kept.

Covers the ordinary path (claim, act, record), what later calls with the same
key see, scopes, the ``@cairn.operation`` form, async functions, the audit row,
waiting on a live claimant, failures and retries, and bad input. Every test
runs on each backend (``store_url``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import date
from typing import Any

import pytest

import cairn
from cairn import (
    Cairn,
    CodecError,
    Context,
    OperationFailed,
    Permanent,
    Retry,
    TaskFailed,
)
from cairn.clock import FakeClock, SystemClock
from cairn.engine.owners import Owner, current_owner
from cairn.store import admin

KEY = "stripe/charge/order-7"
NO_TASK_RETRY = Retry(attempts=1)


class World:
    """The outside system: remembers every act, by key, in order."""

    def __init__(self) -> None:
        self.acts: list[str] = []

    def charge(self, key: str, amount: int = 100) -> dict[str, Any]:
        self.acts.append(key)
        return {"charged": key, "amount": amount}


@pytest.fixture
def world() -> World:
    """A fresh outside world for one test."""
    return World()


@pytest.fixture
def strict_app(store_url: str, clock: FakeClock) -> Iterator[Cairn]:
    """An app whose tasks are not retried, so a failure ends the task at once (on
    each backend)."""
    instance = Cairn(store_url, clock=clock, task_retry=NO_TASK_RETRY)
    yield instance
    instance.close()


def _error_type(app: Cairn, task_id: str) -> str:
    task = app.store.get_task(task_id)
    assert task is not None
    assert task.error is not None
    return str(json.loads(task.error)["type"])


# -- the ordinary path ------------------------------------------------------------------


def test_once_returns_the_result_and_hands_fn_the_key(any_app: Cairn, world: World) -> None:
    """fn is called with the key first, then the given arguments; once returns its result."""

    @any_app.task
    def pay(ctx: Context) -> dict[str, Any]:
        return ctx.once(KEY, world.charge, amount=250)

    assert any_app.run(pay, task_id="pay-1") == {"charged": KEY, "amount": 250}
    assert world.acts == [KEY]


def test_same_key_twice_in_one_task_calls_fn_once(any_app: Cairn, world: World) -> None:
    """A second once with the same key in the same task returns the recorded result
    and does not call fn, even with other arguments."""

    @any_app.task
    def pay_twice(ctx: Context) -> list[Any]:
        return [ctx.once(KEY, world.charge, 100), ctx.once(KEY, world.charge, 999)]

    first, second = any_app.run(pay_twice, task_id="twice")
    assert first == second == {"charged": KEY, "amount": 100}
    assert world.acts == [KEY]
    history = any_app.store.load_history("twice")
    assert [(h.kind, h.name, h.status) for h in history.values()] == [
        ("op", KEY, "completed"),
        ("op", KEY, "completed"),
    ]


def test_same_key_in_another_task_returns_the_recorded_result(any_app: Cairn, world: World) -> None:
    """Keys are global to the store: another task reaching the key reads its result."""

    @any_app.task
    def pay(ctx: Context, order: str) -> dict[str, Any]:
        return ctx.once(KEY, world.charge, 100)

    assert any_app.run(pay, task_id="first", order="7") == {"charged": KEY, "amount": 100}
    assert any_app.run(pay, task_id="second", order="7") == {"charged": KEY, "amount": 100}
    assert world.acts == [KEY]
    row = any_app.store.get_operation("", KEY)
    assert row is not None
    assert row.task_id == "first"
    assert row.calls == 1


def test_replaying_a_finished_task_does_not_call_fn(any_app: Cairn, world: World) -> None:
    """Running a finished task again returns its recorded result; fn is not called."""

    @any_app.task
    def pay(ctx: Context) -> dict[str, Any]:
        return ctx.once(KEY, world.charge)

    first = any_app.run(pay, task_id="pay-1")
    assert any_app.run(pay, task_id="pay-1") == first
    assert world.acts == [KEY]


def test_scope_separates_identical_keys(any_app: Cairn, world: World) -> None:
    """The same key in two scopes names two operations; each runs once."""

    @any_app.task
    def pay(ctx: Context) -> list[Any]:
        return [
            ctx.once(KEY, world.charge, 1, scope="tenant-a"),
            ctx.once(KEY, world.charge, 2, scope="tenant-b"),
            ctx.once(KEY, world.charge, 3, scope="tenant-a"),
        ]

    assert any_app.run(pay, task_id="scoped") == [
        {"charged": KEY, "amount": 1},
        {"charged": KEY, "amount": 2},
        {"charged": KEY, "amount": 1},
    ]
    assert world.acts == [KEY, KEY]
    rows = {(r.scope, r.key): r for r in admin(any_app.store).list_operations()}
    assert set(rows) == {("tenant-a", KEY), ("tenant-b", KEY)}
    assert any_app.store.get_operation("", KEY) is None


# -- the decorator form ---------------------------------------------------------------


def settings_key(app_id: str, day: date) -> str:
    return cairn.op_key("admob", app_id, "apply", day)


def test_operation_decorator_builds_the_key_from_arguments(any_app: Cairn) -> None:
    """@cairn.operation runs the function once per key built from its arguments,
    handing it the key first; callers leave the key out."""
    applied: list[tuple[str, str, date]] = []

    @cairn.operation(key=settings_key)
    def apply_settings(key: str, app_id: str, day: date) -> str:
        applied.append((key, app_id, day))
        return f"applied {app_id}"

    @any_app.task
    def nightly(ctx: Context) -> list[str]:
        day = date(2026, 5, 24)
        return [
            apply_settings("app123", day),
            apply_settings("app123", day),
            apply_settings("app456", day),
        ]

    assert any_app.run(nightly, task_id="nightly") == ["applied app123"] * 2 + ["applied app456"]
    assert applied == [
        ("admob/app123/apply/2026-05-24", "app123", date(2026, 5, 24)),
        ("admob/app456/apply/2026-05-24", "app456", date(2026, 5, 24)),
    ]
    assert any_app.store.get_operation("", "admob/app123/apply/2026-05-24") is not None


def test_async_fn_is_awaited(any_app: Cairn) -> None:
    """An async fn is awaited through ``await ctx.once(...)``, once per key."""
    acts: list[str] = []

    async def send(key: str, text: str) -> str:
        acts.append(key)
        return f"sent {text}"

    @any_app.task
    async def notify(ctx: Context) -> list[str]:
        first = await ctx.once("slack/ops/1", send, "hello")
        second = await ctx.once("slack/ops/1", send, "again")
        return [first, second]

    assert any_app.run(notify, task_id="notify") == ["sent hello", "sent hello"]
    assert acts == ["slack/ops/1"]


# -- the audit row ----------------------------------------------------------------------


def test_completed_operation_row_is_a_full_audit_record(
    any_app: Cairn, clock: FakeClock, world: World
) -> None:
    """After completion the row says who ran it, where, with what result, and when:
    completed, one call, the task and its history position, tz-aware times in order."""

    def slow_charge(key: str) -> dict[str, Any]:
        clock.advance(5)
        return world.charge(key, 42)

    @any_app.task
    def pay(ctx: Context) -> dict[str, Any]:
        ctx.step("quote", lambda: 42)
        return ctx.once(KEY, slow_charge)

    any_app.run(pay, task_id="audit")
    row = any_app.store.get_operation("", KEY)
    assert row is not None
    assert row.status == "completed"
    assert row.calls == 1
    assert row.permanent is False
    assert row.task_id == "audit"
    assert row.step_seq == 2
    assert row.result is not None
    assert json.loads(row.result) == {"charged": KEY, "amount": 42}
    assert row.completed_at is not None
    for moment in (row.first_claimed_at, row.claimed_at, row.completed_at, row.updated_at):
        assert moment.tzinfo is not None
    assert row.first_claimed_at <= row.completed_at
    assert (row.completed_at - row.first_claimed_at).total_seconds() == 5
    entry = any_app.store.load_history("audit")[2]
    assert (entry.kind, entry.name, entry.status) == ("op", KEY, "completed")


# -- a live claimant ----------------------------------------------------------------------


class SignallingClock(SystemClock):
    """The real clock, which also tells the test when a wait has begun."""

    def __init__(self) -> None:
        self.waited = threading.Event()

    def sleep(self, seconds: float) -> None:
        self.waited.set()
        super().sleep(seconds)


def test_a_second_app_waits_for_the_live_claimant_and_reads_its_result(store_url: str) -> None:
    """Two apps (two owners) reach one key: A claims and acts while B's task arrives.

    B sees the claim held by a live, leased task, so it polls (real short sleeps
    in cairn, poll_interval=0.01) instead of calling fn or declaring doubt. Once
    A records, B returns A's result. fn ran exactly once.
    """
    url = store_url
    acting = threading.Event()
    release = threading.Event()
    acts: list[str] = []
    b_clock = SignallingClock()
    app_a = Cairn(url, lease=30)
    app_b = Cairn(url, lease=30, poll_interval=0.01, clock=b_clock)
    me = current_owner()
    app_b.owner = str(Owner(me.host, me.pid, me.start, "0therrun"))
    results: dict[str, Any] = {}

    def slow_charge(key: str) -> str:
        acts.append(key)
        acting.set()
        release.wait(timeout=10)
        return "charged by A"

    @app_a.task(name="pay")
    def pay_a(ctx: Context) -> str:
        return ctx.once(KEY, slow_charge)

    @app_b.task(name="pay")
    def pay_b(ctx: Context) -> str:
        return ctx.once(KEY, slow_charge)

    def run(name: str, app: Cairn, task: Any) -> None:
        try:
            results[name] = app.run(task, task_id=f"pay-{name}")
        except Exception as exc:  # noqa: BLE001 - reported by the assertions below
            results[name] = exc

    thread_a = threading.Thread(target=run, args=("a", app_a, pay_a))
    thread_b = threading.Thread(target=run, args=("b", app_b, pay_b))
    try:
        thread_a.start()
        assert acting.wait(timeout=10), "A never reached its operation"
        thread_b.start()
        assert b_clock.waited.wait(timeout=10), "B never waited on A's claim"
        assert "b" not in results
    finally:
        release.set()
        thread_a.join(timeout=10)
        thread_b.join(timeout=10)
        app_a.close()
        app_b.close()
    assert not thread_a.is_alive()
    assert not thread_b.is_alive()
    assert results == {"a": "charged by A", "b": "charged by A"}
    assert acts == [KEY]


# -- failures -------------------------------------------------------------------------------


def test_transient_failures_are_retried_by_the_operation_policy(
    any_app: Cairn, clock: FakeClock
) -> None:
    """fn failing twice then succeeding, with retry=Retry(attempts=3): three calls with
    the same key, the result recorded, and the row counts calls == 3."""
    calls: list[str] = []

    def flaky(key: str) -> str:
        calls.append(key)
        if len(calls) < 3:
            raise ConnectionError("gateway timeout")
        return "charged"

    @any_app.task
    def pay(ctx: Context) -> str:
        return ctx.once(KEY, flaky, retry=Retry(attempts=3, initial_delay=2, jitter=0))

    assert any_app.run(pay, task_id="flaky") == "charged"
    assert calls == [KEY, KEY, KEY]
    assert clock.slept == [2, 4]
    row = any_app.store.get_operation("", KEY)
    assert row is not None
    assert (row.status, row.calls) == ("completed", 3)


def test_permanent_failure_leaves_the_key_failed_until_released(
    strict_app: Cairn, clock: FakeClock
) -> None:
    """fn raising Permanent: the row is failed and permanent, the task fails; a later
    task with the key gets OperationFailed without a call; once an operator
    releases the key, the next task calls fn again."""
    calls: list[str] = []
    declined = [True]

    def charge(key: str) -> str:
        calls.append(key)
        if declined[0]:
            raise Permanent("card declined")
        return "charged"

    @strict_app.task
    def pay(ctx: Context, attempt: int) -> str:
        return ctx.once(KEY, charge, retry=Retry(attempts=3, initial_delay=0))

    with pytest.raises(TaskFailed, match="card declined"):
        strict_app.run(pay, attempt=1)
    row = strict_app.store.get_operation("", KEY)
    assert row is not None
    assert (row.status, row.permanent, row.calls) == ("failed", True, 1)
    assert row.error is not None
    assert json.loads(row.error)["type"] == "cairn.errors.Permanent"
    assert calls == [KEY]

    with pytest.raises(TaskFailed) as later:
        strict_app.run(pay, attempt=2)
    assert isinstance(later.value.__cause__, OperationFailed)
    assert "cairn ops resolve" in str(later.value.__cause__)
    assert later.value.__cause__.key == KEY
    assert calls == [KEY]

    declined[0] = False
    assert admin(strict_app.store).resolve_operation(
        "", KEY, "released", result=None, permanent=False, now=clock.now()
    )
    assert strict_app.run(pay, attempt=3) == "charged"
    assert calls == [KEY, KEY]
    row = strict_app.store.get_operation("", KEY)
    assert row is not None
    assert (row.status, row.calls) == ("completed", 2)


def test_permanent_failure_in_a_scope_says_how_to_release_that_scoped_key(
    strict_app: Cairn,
) -> None:
    """The OperationFailed for a scoped key tells the operator the command that
    reaches it: `cairn ops resolve KEY --scope SCOPE --retry` (without --scope the
    command would name another, unscoped key)."""

    def decline(key: str) -> str:
        raise Permanent("card declined")

    @strict_app.task
    def pay(ctx: Context, attempt: int) -> str:
        return ctx.once(KEY, decline, scope="tenant-a")

    with pytest.raises(TaskFailed):
        strict_app.run(pay, attempt=1)
    with pytest.raises(TaskFailed) as later:
        strict_app.run(pay, attempt=2)
    cause = later.value.__cause__
    assert isinstance(cause, OperationFailed)
    assert (cause.key, cause.scope) == (KEY, "tenant-a")
    assert "cairn ops resolve" in str(cause)
    assert "--scope tenant-a" in str(cause)


def test_exhausted_transient_failure_leaves_the_key_failed_and_retryable(
    strict_app: Cairn, clock: FakeClock
) -> None:
    """Transient errors that use up the operation's retries leave the key failed but
    not permanent; retrying the task (``cairn retry``) calls fn again."""
    calls: list[str] = []

    def charge(key: str) -> str:
        calls.append(key)
        if len(calls) <= 2:
            raise ConnectionError("gateway timeout")
        return "charged"

    @strict_app.task
    def pay(ctx: Context) -> str:
        return ctx.once(KEY, charge, retry=Retry(attempts=2, initial_delay=0))

    with pytest.raises(TaskFailed, match="gateway timeout"):
        strict_app.run(pay, task_id="pay")
    row = strict_app.store.get_operation("", KEY)
    assert row is not None
    assert (row.status, row.permanent, row.calls) == ("failed", False, 2)
    assert calls == [KEY, KEY]

    assert admin(strict_app.store).retry_task("pay", clock.now())
    assert strict_app.run(pay, task_id="pay") == "charged"
    assert calls == [KEY, KEY, KEY]
    row = strict_app.store.get_operation("", KEY)
    assert row is not None
    assert (row.status, row.calls) == ("completed", 3)


# -- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad_key", "error_type"),
    [
        ("", "builtins.ValueError"),
        ("   \t", "builtins.ValueError"),
        (42, "builtins.TypeError"),
        (None, "builtins.TypeError"),
    ],
)
def test_bad_keys_are_refused_before_anything_is_written(
    strict_app: Cairn, bad_key: Any, error_type: str
) -> None:
    """An empty, blank or non-str key fails the task with a clear ValueError or
    TypeError; fn is not called and no operation or history row is written."""
    calls: list[Any] = []

    @strict_app.task
    def pay(ctx: Context) -> Any:
        return ctx.once(bad_key, lambda key: calls.append(key))

    with pytest.raises(TaskFailed, match="op_key"):
        strict_app.run(pay, task_id="bad")
    assert _error_type(strict_app, "bad") == error_type
    assert calls == []
    assert list(admin(strict_app.store).list_operations()) == []
    assert strict_app.store.load_history("bad") == {}


def test_a_long_key_is_hashed_not_truncated(any_app: Cairn) -> None:
    """A 500-character key is stored as a readable prefix plus a hash: within the
    limit, the same on every call, and distinct from a key differing at its end."""
    prefix = "crm/contact/"
    long_a = prefix + "a" * 488
    long_b = prefix + "a" * 487 + "b"
    calls: list[str] = []

    def act(key: str) -> str:
        calls.append(key)
        return key

    @any_app.task
    def sync(ctx: Context) -> list[str]:
        return [ctx.once(long_a, act), ctx.once(long_a, act), ctx.once(long_b, act)]

    first, again, other = any_app.run(sync, task_id="long")
    assert first == again != other
    assert calls == [first, other]
    rows = list(admin(any_app.store).list_operations())
    assert sorted(r.key for r in rows) == sorted([first, other])
    for row in rows:
        assert len(row.key) <= 200
        assert row.key.startswith(prefix + "aaaa")


def test_unencodable_result_leaves_the_key_in_doubt(strict_app: Cairn) -> None:
    """fn returning a value the codec cannot record (a lock): a CodecError naming
    the operation and the type fails the task; the row is left in doubt, not
    completed with garbage; fn ran once, and a later run does not call it again."""
    calls: list[str] = []

    def make_lock(key: str) -> threading.Lock:
        calls.append(key)
        return threading.Lock()

    @strict_app.task
    def grab(ctx: Context) -> Any:
        return ctx.once(KEY, make_lock)

    with pytest.raises(TaskFailed) as failed:
        strict_app.run(grab, task_id="lock")
    cause = failed.value.__cause__
    assert isinstance(cause, CodecError)
    assert KEY in str(cause)
    assert "lock" in str(cause)
    row = strict_app.store.get_operation("", KEY)
    assert row is not None
    assert (row.status, row.calls, row.result) == ("in_doubt", 1, None)
    assert calls == [KEY]

    with pytest.raises(TaskFailed, match="in doubt"):
        strict_app.run(grab, task_id="lock-again")
    assert calls == [KEY]
