"""Two runners on the same work (scenario 4): exactly one runs each task.

A runner whose lease was taken over stops at its next write, records nothing,
and cannot be kept going by an ``except Exception`` in the task's code. Every
test runs on SQLite and on PostgreSQL, the two-process race included.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from cairn import Cairn, Context, LeaseLost, Permanent, TaskCancelled, TaskFailed
from cairn.clock import FakeClock
from cairn.engine.claim import WAIT, Claimer
from cairn.engine.owners import Owner, current_owner, takeover_grace
from cairn.store import admin, open_store

LEASE_SECONDS = 30.0
# Past the lease and the grace a taker still honours it for (ownership.takeover_grace).
PAST_LEASE = LEASE_SECONDS + takeover_grace(timedelta(seconds=LEASE_SECONDS)).total_seconds() + 1


def _other_owner() -> str:
    """An owner string unlike this process's, for a second runner inside this process."""
    me = current_owner()
    return str(Owner(me.host, me.pid, me.start, "0therrun"))


@pytest.fixture
def runner_b(store_url: str, clock: FakeClock) -> Iterator[Cairn]:
    """A second runner on the same store and clock, with an owner identity of its own."""
    other = Cairn(store_url, clock=clock)
    other.owner = _other_owner()
    yield other
    other.close()


def test_lease_lost_stops_the_runner_and_nothing_is_recorded(
    any_app: Cairn, runner_b: Cairn, clock: FakeClock
) -> None:
    """A runner whose lease expired and was claimed by another stops at its next write.

    Runner A is inside its first step when its lease runs out and runner B claims
    the task. A's step returns, but its result is not recorded: the write raises
    ``LeaseLost``, which the task's ``except Exception`` cannot swallow, so A
    never reaches its second step. The task stays B's, and A's heartbeat cannot
    renew a lease it no longer holds.
    """
    happened: list[str] = []

    def work(ctx: Context) -> str:
        happened.append("A worked")
        clock.advance(PAST_LEASE)
        task = runner_b.store.get_task(ctx.task_id)
        assert task is not None
        assert task.lease_expires_at is not None
        assert task.lease_expires_at < clock.now()
        claimed = runner_b.store.claim_task(
            task.id,
            task.fence,
            runner_b.owner,
            runner_b.leases.lease_until(),
            clock.now(),
            lapsed_before=clock.now(),
        )
        assert claimed is not None, "B could not claim the expired task"
        return "A's result"

    @any_app.task(name="report")
    def report(ctx: Context, day: str) -> str:
        try:
            ctx.step("work", work, ctx)
        except Exception:  # noqa: BLE001 - an agent that swallows every error
            happened.append("A swallowed an error and carried on")
        ctx.step("post", lambda: happened.append("A posted"))
        return "posted"

    with pytest.raises(LeaseLost) as lost:
        any_app.run(report, task_id="daily", day="2026-05-24")
    assert lost.value.task_id == "daily"
    assert not isinstance(lost.value, Exception)
    assert happened == ["A worked"]
    assert any_app.store.load_history("daily") == {}
    task = any_app.store.get_task("daily")
    assert task is not None
    assert (task.status, task.owner, task.fence) == ("running", runner_b.owner, 2)
    assert any_app.store.renew_leases(any_app.owner, any_app.leases.lease_until()) == []


def test_only_the_runner_holding_the_lease_finishes_the_task(
    any_app: Cairn, runner_b: Cairn, clock: FakeClock
) -> None:
    """When B takes over an expired task and finishes it, A's late result is dropped.

    Runner A runs a batch; inside the first step its lease expires and runner B
    runs the whole task to completion. A's step then returns: A stops with the
    task counted as lost, not failed, and the recorded history is B's alone. The
    daily report is posted once.
    """
    posted: list[str] = []
    takeovers: list[str] = []

    def fetch(task_id: str) -> str:
        if takeovers:
            return "B's data"  # B's own call of this step, inside the takeover
        takeovers.append(task_id)
        clock.advance(PAST_LEASE)
        assert runner_b.run(report_b, task_id=task_id, day="2026-05-24") == "posted"
        return "A's data"

    def post(data: str, who: str) -> None:
        posted.append(f"{who}: {data}")

    def publish(ctx: Context, who: str) -> str:
        data: str = ctx.step("fetch", fetch, ctx.task_id)
        ctx.step("post", post, data, who)
        return "posted"

    @any_app.task(name="report")
    def report_a(ctx: Context, day: str) -> str:
        return publish(ctx, "A")

    @runner_b.task(name="report")
    def report_b(ctx: Context, day: str) -> str:
        return publish(ctx, "B")

    summary = any_app.run_batch("daily", report_a, [{"day": "2026-05-24"}], progress=False)
    assert posted == ["B: B's data"]
    assert (summary.ran, summary.completed, summary.failures) == (1, 1, [])
    task_id = "daily/day=2026-05-24"
    history = any_app.store.load_history(task_id)
    assert [(r.name, r.output) for r in history.values()] == [
        ("fetch", '"B\'s data"'),
        ("post", "null"),
    ]
    task = any_app.store.get_task(task_id)
    assert task is not None
    assert task.status == "completed"


# Each process runs the same 20-task batch; every step appends "task step pid".
_RACER = """
import os, sys, time
from pathlib import Path
from cairn import Cairn

url, counts, ready, go = sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
app = Cairn(url, poll_interval=0.05)

def mark(n, step):
    with open(counts, "a") as out:
        out.write(f"{n} {step} {os.getpid()}\\n")

@app.task(name="race")
def race(ctx, n):
    for step in ("fetch", "post"):
        ctx.step(step, mark, n, step)
    return n

ready.touch()
while not go.exists():
    time.sleep(0.002)  # real-sleep-ok: both racers start on the test's signal
report = app.run_batch("race", race, [{"n": n} for n in range(20)], concurrency=2, progress=False)
print(report.ran, report.completed, flush=True)
"""


def _start_racers(url: str, counts: Path, tmp: Path) -> list[subprocess.Popen[str]]:
    go = tmp / "go"
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, url, str(counts), str(tmp / f"ready{i}"), str(go)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    deadline = time.monotonic() + 60
    while not all((tmp / f"ready{i}").exists() for i in range(2)):
        assert time.monotonic() < deadline, "the racers did not start"
        assert all(r.poll() is None for r in racers), "a racer died while starting"
        time.sleep(0.01)  # real-sleep-ok: waiting on a real subprocess
    go.touch()
    return racers


@pytest.mark.requires("multi_process")
def test_two_processes_on_one_batch_run_each_task_exactly_once(
    store_url: str, tmp_path: Path
) -> None:
    """Two processes start the same 20-task batch at the same moment (on every
    store whose capabilities say it takes writers from several processes).

    Every step of every task runs exactly once, every task is run by one process
    only and claimed once (its fence is 1), and the two reports add up to 20.
    """
    open_store(store_url).close()  # made first: the race is about tasks, not creation
    counts = tmp_path / "counts.txt"
    racers = _start_racers(store_url, counts, tmp_path)
    outputs = []
    try:
        for racer in racers:
            out, _ = racer.communicate(timeout=90)
            assert racer.returncode == 0
            outputs.append(out.split())
    finally:
        for racer in racers:
            if racer.poll() is None:
                racer.kill()
                racer.communicate()

    lines = [line.split() for line in counts.read_text().splitlines()]
    runs = Counter((n, step) for n, step, _ in lines)
    assert runs == Counter({(str(n), s): 1 for n in range(20) for s in ("fetch", "post")})
    pids_per_task = {n: {pid for m, _, pid in lines if m == n} for n, _, _ in lines}
    assert all(len(pids) == 1 for pids in pids_per_task.values()), pids_per_task
    assert sum(int(ran) for ran, _ in outputs) == 20
    assert all(completed == "20" for _, completed in outputs)
    with Cairn(store_url) as check:
        tasks = list(admin(check.store).list_tasks(batch="race"))
    assert len(tasks) == 20
    assert {(t.status, t.fence) for t in tasks} == {("completed", 1)}


def test_a_batch_run_does_not_end_while_another_process_runs_its_last_task(
    any_app: Cairn, runner_b: Cairn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claimer that looked for work elsewhere, then lost the last pending task
    to another runner between that look and its claim, waits: it does not say
    the batch is over while the other runner still runs that task.

    (Two processes on one batch each printed a report of 19 completed of 20
    when this answered "nothing left".)
    """

    @any_app.task(name="race")
    def race(ctx: Context, n: int) -> int:
        return n

    any_app.enqueue("race", race, [{"n": 1}])
    engine, other = any_app.engine(), runner_b.engine()
    store = engine.store
    real_claim = store.claim_next_pending

    def b_claims_first(*args: object, **kwargs: object) -> object:
        taken = Claimer(other, "race").next()
        assert taken is not None
        assert taken != WAIT
        assert taken.owner == runner_b.owner
        return real_claim(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "claim_next_pending", b_claims_first)
    assert Claimer(engine, "race").next() == WAIT


# -- cancellation moves the fence too ------------------------------------------------


def test_cancelled_pending_task_is_skipped_by_run_batch(any_app: Cairn, clock: FakeClock) -> None:
    """A task cancelled before it ran is never run; the report counts it as cancelled."""
    ran: list[str] = []

    @any_app.task
    def review(ctx: Context, app_id: str) -> str:
        ran.append(app_id)
        return app_id

    items = [{"app_id": name} for name in ("a1", "a2", "a3")]
    any_app.enqueue("apps", review, items)
    assert admin(any_app.store).cancel_task("apps/app_id=a2", clock.now())

    report = any_app.run_batch("apps", review, items, progress=False)
    assert sorted(ran) == ["a1", "a3"]
    assert (report.total, report.ran, report.skipped) == (3, 2, 1)
    assert (report.completed, report.cancelled, report.failed) == (2, 1, 0)
    assert not report.ok


def test_cancel_while_running_stops_the_task_at_its_next_write(
    any_app: Cairn, clock: FakeClock
) -> None:
    """A task cancelled while inside a step stops when that step tries to record.

    The task sees ``Cancelled``, which its ``except Exception`` cannot swallow;
    the step's result is not recorded, the task stays cancelled, and running it
    again raises ``TaskCancelled`` without running anything.
    """
    seen: list[str] = []

    def work(task_id: str) -> str:
        seen.append("work")
        assert admin(any_app.store).cancel_task(task_id, clock.now())
        return "done"

    @any_app.task
    def agent(ctx: Context, topic: str) -> str:
        try:
            ctx.step("work", work, ctx.task_id)
        except Exception:  # noqa: BLE001 - an agent that swallows every error
            seen.append("swallowed")
        except BaseException as stop:
            seen.append(type(stop).__name__)
            raise
        ctx.step("more", lambda: seen.append("more"))
        return "finished"

    with pytest.raises(TaskCancelled) as cancelled:
        any_app.run(agent, task_id="t1", topic="x")
    assert cancelled.value.task_id == "t1"
    assert seen == ["work", "Cancelled"]
    assert any_app.store.load_history("t1") == {}
    task = any_app.store.get_task("t1")
    assert task is not None
    assert (task.status, task.owner) == ("cancelled", None)

    with pytest.raises(TaskCancelled):
        any_app.run(agent, task_id="t1", topic="x")
    assert seen == ["work", "Cancelled"]


def test_cancel_while_running_in_a_batch_is_reported_not_failed(
    any_app: Cairn, clock: FakeClock
) -> None:
    """In a batch, a task cancelled mid-step ends cancelled; the other tasks complete."""

    def work(task_id: str) -> str:
        if task_id.endswith("=b"):
            admin(any_app.store).cancel_task(task_id, clock.now())
        return task_id

    @any_app.task
    def job(ctx: Context, name: str) -> str:
        result: str = ctx.step("work", work, ctx.task_id)
        return result

    items = [{"name": n} for n in "abc"]
    report = any_app.run_batch("jobs", job, items, concurrency=1, progress=False)
    assert (report.completed, report.cancelled, report.failed, report.failures) == (2, 1, 0, [])
    task = any_app.store.get_task("jobs/name=b")
    assert task is not None
    assert task.status == "cancelled"
    assert any_app.store.load_history("jobs/name=b") == {}


def test_retry_task_brings_failed_and_cancelled_tasks_back(
    any_app: Cairn, clock: FakeClock
) -> None:
    """``retry_task`` moves a failed or cancelled task back to pending, and it then
    completes; a completed task cannot be retried."""
    broken = {"yes"}

    def fetch() -> str:
        if broken:
            raise Permanent("the API said no")
        return "data"

    @any_app.task
    def sync(ctx: Context, day: str) -> str:
        result: str = ctx.step("fetch", fetch)
        return result

    with pytest.raises(TaskFailed):
        any_app.run(sync, task_id="failing", day="d1")
    any_app.enqueue("days", sync, [{"day": "d2"}])
    assert admin(any_app.store).cancel_task("days/day=d2", clock.now())

    broken.clear()
    for task_id in ("failing", "days/day=d2"):
        assert admin(any_app.store).retry_task(task_id, clock.now())
        task = any_app.store.get_task(task_id)
        assert task is not None
        assert task.status == "pending"
    assert any_app.run(sync, task_id="failing", day="d1") == "data"
    report = any_app.run_batch("days", sync, progress=False)
    assert (report.ran, report.completed, report.ok) == (1, 1, True)
    for task_id in ("failing", "days/day=d2"):
        assert not admin(any_app.store).retry_task(task_id, clock.now()), (
            "a completed task was retried"
        )
