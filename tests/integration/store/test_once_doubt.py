"""``ctx.once`` when an attempt died between claim and record: the key is in doubt.

How a dying attempt is simulated in-process: a fault hook raises ``Crash`` (a
``BaseException``, which cairn lets through untouched) at "after_claim" (the claim
is committed, fn not yet called), "after_act" (fn returned, nothing recorded) or
"after_record". The task is left 'running' under this process's owner. The run
that resumes it is a NEW ``Cairn`` on the same store whose owner is on another
host (so cairn cannot check whether the old owner lives) with the fake clock
moved past the dead attempt's lease: it reclaims the task through lease expiry,
as a restarted worker elsewhere would.

Every test runs once on SQLite and once on PostgreSQL (the ``store_url`` fixture).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from cairn import Cairn, Context, InDoubtOperation, LeaseLost, Retry, TaskDef, TaskFailed
from cairn.clock import FakeClock
from cairn.store import admin
from cairn.store.records import OperationRecord
from cairn.testing import set_fault_hook
from tests.crashes import LEASE, PAST_LEASE, Crash

KEY = "stripe/charge/order-7"


@dataclass
class World:
    """The outside system: every act by key, and a way to ask what happened."""

    acts: list[str] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)

    def charge(self, key: str) -> dict[str, str]:
        self.acts.append(key)
        return {"charge": f"ch_{len(self.acts)}"}

    def reconcile(self, key: str) -> dict[str, str] | None:
        """What the outside system says about ``key``: its charge, or None."""
        self.asked.append(key)
        return {"charge": "ch_1"} if key in self.acts else None


@dataclass
class Runs:
    """Makes the apps of successive processes on one store."""

    url: str
    clock: FakeClock
    world: World
    apps: list[Cairn] = field(default_factory=list)

    def first(self, crash_at: str | None = None, **policy: Any) -> tuple[Cairn, TaskDef[..., Any]]:
        """The first process, crashing at ``crash_at`` if given."""
        app = self.app()
        if crash_at is not None:
            set_fault_hook(app, _crash_at(crash_at))
        return app, self._register(app, policy)

    def resumed(self, **policy: Any) -> tuple[Cairn, TaskDef[..., Any]]:
        """A later process on another host, once the previous attempt's lease expired."""
        self.clock.advance(PAST_LEASE)
        app = self.app(elsewhere=True)
        return app, self._register(app, policy)

    def crashed(self, point: str, **policy: Any) -> None:
        """Run the task in a first process that dies at ``point``."""
        app, pay = self.first(crash_at=point, **policy)
        with pytest.raises(Crash):
            app.run(pay, task_id="pay")
        task = app.store.get_task("pay")
        assert task is not None
        assert task.status == "running"

    def app(self, *, elsewhere: bool = False) -> Cairn:
        """An app on the store, with no task registered; ``elsewhere``: its owner is
        on another host."""
        app = Cairn(self.url, clock=self.clock, lease=LEASE, task_retry=Retry(attempts=1))
        if elsewhere:
            app.owner = f"otherhost-{len(self.apps)}/1/1/abc"
        self.apps.append(app)
        return app

    def _register(self, app: Cairn, policy: dict[str, Any]) -> TaskDef[..., Any]:
        world = self.world

        @app.task(name="pay")
        def pay(ctx: Context) -> Any:
            return ctx.once(KEY, world.charge, **policy)

        return pay


def _crash_at(point: str) -> Any:
    def hook(at: str, task_id: str, seq: int, name: str) -> None:
        if at == point:
            raise Crash(f"{point} {name}")

    return hook


@pytest.fixture
def world() -> World:
    """A fresh outside world for one test."""
    return World()


@pytest.fixture
def runs(store_url: str, clock: FakeClock, world: World) -> Iterator[Runs]:
    """Successive processes on one store (of each backend); every app is closed at the end."""
    maker = Runs(store_url, clock, world)
    yield maker
    for app in maker.apps:
        app.close()


def _row(app: Cairn) -> OperationRecord:
    row = app.store.get_operation("", KEY)
    assert row is not None
    return row


# -- the default policy: stop -----------------------------------------------------------------


@pytest.mark.parametrize(("point", "acts"), [("after_claim", 0), ("after_act", 1)])
def test_default_policy_stops_the_resumed_task_with_in_doubt(
    runs: Runs, world: World, point: str, acts: int
) -> None:
    """A key claimed by an attempt that died stops the resumed task with
    InDoubtOperation, whose message says how to settle it (`cairn ops resolve`);
    fn is not called again and the row is marked in_doubt."""
    runs.crashed(point)
    assert len(world.acts) == acts
    app, pay = runs.resumed()
    with pytest.raises(TaskFailed) as failed:
        app.run(pay, task_id="pay")
    cause = failed.value.__cause__
    assert isinstance(cause, InDoubtOperation)
    assert cause.key == KEY
    assert "cairn ops resolve" in str(cause)
    assert failed.value.error["type"] == "cairn.errors.InDoubtOperation"
    assert len(world.acts) == acts
    row = _row(app)
    assert (row.status, row.calls) == ("in_doubt", 1)


def test_another_task_finding_a_dead_claim_stops_with_in_doubt(runs: Runs, world: World) -> None:
    """Keys are store-wide: a different task reaching a key whose claimant task died
    (its lease expired) treats it as in doubt too, and does not call fn."""
    runs.crashed("after_act")
    app, pay = runs.resumed()
    with pytest.raises(TaskFailed) as failed:
        app.run(pay, task_id="pay-again")
    assert isinstance(failed.value.__cause__, InDoubtOperation)
    assert world.acts == [KEY]
    row = _row(app)
    assert (row.status, row.task_id) == ("in_doubt", "pay")


# -- reconcile ----------------------------------------------------------------------------------


def test_reconcile_that_finds_the_act_records_its_answer(runs: Runs, world: World) -> None:
    """Crash after fn acted: reconcile(key) finds the act, its answer is recorded as
    the completed result, and fn is not called again."""
    runs.crashed("after_act", reconcile=world.reconcile)
    app, pay = runs.resumed(reconcile=world.reconcile)
    assert app.run(pay, task_id="pay") == {"charge": "ch_1"}
    assert world.asked == [KEY]
    assert world.acts == [KEY]
    row = _row(app)
    assert (row.status, row.calls) == ("completed", 1)
    assert row.result is not None
    assert json.loads(row.result) == {"charge": "ch_1"}


def test_reconcile_that_finds_nothing_calls_fn_again_with_the_same_key(
    runs: Runs, world: World
) -> None:
    """Crash before fn acted: reconcile answers None, so fn is called (again, as far
    as cairn knows) with the same key; the row counts both claims, calls == 2."""
    runs.crashed("after_claim", reconcile=world.reconcile)
    assert world.acts == []
    app, pay = runs.resumed(reconcile=world.reconcile)
    assert app.run(pay, task_id="pay") == {"charge": "ch_1"}
    assert world.asked == [KEY]
    assert world.acts == [KEY]
    row = _row(app)
    assert (row.status, row.calls) == ("completed", 2)


def test_reconcile_settles_a_key_already_marked_in_doubt(runs: Runs, world: World) -> None:
    """A key an earlier run marked in_doubt (default policy) is reconciled too when
    the operation now has reconcile=: the outside world says it happened, so its
    answer is recorded and fn is NOT called a second time."""
    runs.crashed("after_act")
    app, pay = runs.resumed()
    with pytest.raises(TaskFailed):
        app.run(pay, task_id="pay")
    assert _row(app).status == "in_doubt"
    assert admin(app.store).retry_task("pay", runs.clock.now())

    app, pay = runs.resumed(reconcile=world.reconcile)
    assert app.run(pay, task_id="pay") == {"charge": "ch_1"}
    assert world.asked == [KEY]
    assert world.acts == [KEY], "reconcile said it happened, yet fn was called again"
    row = _row(app)
    assert (row.status, row.calls) == ("completed", 1)


# -- on_doubt="retry" ------------------------------------------------------------------------------


@pytest.mark.parametrize("point", ["after_claim", "after_act"])
def test_on_doubt_retry_calls_fn_again_with_the_same_key(
    runs: Runs, world: World, point: str
) -> None:
    """on_doubt="retry": the resumed task calls fn again with the same key (the outside
    system removes duplicates by it); the row counts two calls."""
    runs.crashed(point, on_doubt="retry")
    app, pay = runs.resumed(on_doubt="retry")
    result = app.run(pay, task_id="pay")
    assert result == {"charge": f"ch_{len(world.acts)}"}
    assert world.acts == [KEY] * (2 if point == "after_act" else 1)
    row = _row(app)
    assert (row.status, row.calls) == ("completed", 2)


# -- an operator settles it ------------------------------------------------------------------------


def test_released_key_is_called_again_on_the_next_run(runs: Runs, world: World) -> None:
    """After the operator releases an in-doubt key ("it did not happen"), retrying the
    task calls fn again with the same key and records the new result."""
    runs.crashed("after_act")
    app, pay = runs.resumed()
    with pytest.raises(TaskFailed):
        app.run(pay, task_id="pay")
    assert admin(app.store).resolve_operation(
        "", KEY, "released", result=None, permanent=False, now=runs.clock.now()
    )
    assert admin(app.store).retry_task("pay", runs.clock.now())
    assert app.run(pay, task_id="pay") == {"charge": "ch_2"}
    assert world.acts == [KEY, KEY]
    row = _row(app)
    assert (row.status, row.calls) == ("completed", 2)


def test_key_resolved_completed_returns_the_given_result(runs: Runs, world: World) -> None:
    """After the operator resolves an in-doubt key as completed with a result ("it
    happened"), the next run returns that result without calling fn."""
    runs.crashed("after_claim")
    app, pay = runs.resumed()
    with pytest.raises(TaskFailed):
        app.run(pay, task_id="pay")
    assert admin(app.store).resolve_operation(
        "", KEY, "completed", result='{"charge":"ch_manual"}', permanent=False, now=runs.clock.now()
    )
    assert admin(app.store).retry_task("pay", runs.clock.now())
    assert app.run(pay, task_id="pay") == {"charge": "ch_manual"}
    assert world.acts == []
    row = _row(app)
    assert row.status == "completed"
    assert row.completed_at is not None


# -- not in doubt ---------------------------------------------------------------------------------


def test_crash_after_record_replays_the_result(runs: Runs, world: World) -> None:
    """A crash after the result was committed is no doubt at all: the resumed task
    replays the recorded result and fn is not called again."""
    runs.crashed("after_record")
    app, pay = runs.resumed()
    assert app.run(pay, task_id="pay") == {"charge": "ch_1"}
    assert world.acts == [KEY]
    row = _row(app)
    assert (row.status, row.calls) == ("completed", 1)


def test_lease_lost_after_act_records_the_result_only_as_late(
    runs: Runs, world: World, clock: FakeClock
) -> None:
    """fn acts, then (from inside fn) another owner claims the task, moving its fence
    before the record. The old runner writes nothing into the history its
    successor now owns: the key stays claimed by the dead attempt, with what the
    old runner learned kept as the key's late result for the audit; the old
    runner stops with LeaseLost. The new owner finds the key in doubt, asks the
    outside world (reconcile), and takes the charge that happened: fn is not
    called again."""
    app_a = runs.app()
    app_b = runs.app(elsewhere=True)

    def charge_then_lose_lease(key: str) -> dict[str, str]:
        result = world.charge(key)
        task = app_a.store.get_task("pay")
        assert task is not None
        taken = app_b.store.claim_task(
            "pay",
            task.fence,
            app_b.owner,
            app_b.leases.lease_until(),
            clock.now(),
            owner_gone=True,
        )
        assert taken is not None
        return result

    @app_a.task(name="pay")
    def pay_a(ctx: Context) -> Any:
        return ctx.once(KEY, charge_then_lose_lease)

    with pytest.raises(LeaseLost):
        app_a.run(pay_a, task_id="pay")
    row = _row(app_a)
    assert (row.status, row.calls, row.result) == ("claimed", 1, None)
    assert row.late_result is not None
    assert json.loads(row.late_result) == {"charge": "ch_1"}
    assert row.late_at is not None
    assert app_a.store.load_history("pay") == {}

    @app_b.task(name="pay")
    def pay_b(ctx: Context) -> Any:
        return ctx.once(KEY, charge_then_lose_lease, reconcile=world.reconcile)

    assert app_b.run(pay_b, task_id="pay") == {"charge": "ch_1"}
    assert world.acts == [KEY]
    assert world.asked == [KEY]
    assert app_b.store.load_history("pay")[1].kind == "op"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("policy", ["raise", "reconcile"])
def test_a_retried_attempt_does_not_wait_for_its_own_claim(
    runs: Runs, world: World, policy: str
) -> None:
    """fn acts, then recording its answer fails with an ordinary error (here from a
    fault hook), so the task's own retry policy runs the task again in the same
    process, under the same fence. The key is claimed by this very task and fence,
    but nothing in this run acts on it: that claim is dead, not alive, so the
    retry settles it by its policy (in doubt, or reconciled) instead of waiting
    for itself forever. fn is not called again."""
    app = Cairn(runs.url, clock=runs.clock, lease=LEASE, task_retry=Retry(attempts=2))
    runs.apps.append(app)
    failures = [RuntimeError("the record could not be written")]

    def fail_once_after_act(point: str, task_id: str, seq: int, name: str) -> None:
        if point == "after_act" and failures:
            raise failures.pop()

    set_fault_hook(app, fail_once_after_act)
    reconcile = world.reconcile if policy == "reconcile" else None

    @app.task(name="pay")
    def pay(ctx: Context) -> Any:
        return ctx.once(KEY, world.charge, reconcile=reconcile)

    if policy == "raise":
        with pytest.raises(TaskFailed) as failed:
            app.run(pay, task_id="pay")
        assert failed.value.error["type"] == "cairn.errors.InDoubtOperation"
        assert _row(app).status == "in_doubt"
    else:
        assert app.run(pay, task_id="pay") == {"charge": "ch_1"}
        assert world.asked == [KEY]
    assert world.acts == [KEY]
