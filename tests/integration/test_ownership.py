"""Who may run a task: a dead owner's task is taken over at once, a live owner's never.

The cross-process tests run a real second process on the same SQLite file and use
the real clock, because what they check is the interplay of real pids, real
signals and real lease renewals. The last ones are about this process's own tasks.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from threading import Thread

import pytest

from cairn import BatchReport, Cairn, Context, TaskBusy
from cairn.engine.claim import claim_task
from cairn.engine.owners import Owner
from cairn.store.records import TaskRecord
from cairn.task import TaskDef

# The other process. Its task "held" records "prepare", then blocks in "wait"
# until the test creates the gate file named after the item.
_WORKER = """
import os, signal, sys, time
from pathlib import Path
from cairn import Cairn
from cairn.testing import set_fault_hook

db, gates, mode, lease = sys.argv[1], Path(sys.argv[2]), sys.argv[3], float(sys.argv[4])
app = Cairn(f"sqlite:///{db}", lease=lease, poll_interval=0.05)

def wait_for_gate(item):
    while not (gates / item).exists():
        time.sleep(0.01)  # real-sleep-ok: the test opens the gate
    return f"done by {os.getpid()}"

@app.task(name="held")
def held(ctx, item):
    ctx.step("prepare", lambda: item)
    return ctx.step("wait", wait_for_gate, item)

def die_before_wait(point, task_id, seq, name):
    if point == "before_step" and name == "wait":
        os.kill(os.getpid(), signal.SIGKILL)

if mode == "suicide":
    set_fault_hook(app, die_before_wait)
    app.run(held, task_id="solo", item="x")
elif mode == "run":
    print(app.run(held, task_id="solo", item="x"), flush=True)
else:
    items = [{"item": name} for name in mode.split(",")]
    print(app.run_batch("b", held, items, concurrency=1, progress=False).ran, flush=True)
"""

LEASE = 1.5  # the live owner's lease; its heartbeat renews it every 0.5 s


@contextmanager
def _worker(
    db: Path, gates: Path, mode: str, lease: float = 30.0
) -> Iterator[subprocess.Popen[str]]:
    """Start the other process; make sure it is gone when the test ends."""
    child = subprocess.Popen(
        [sys.executable, "-c", _WORKER, str(db), str(gates), mode, str(lease)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield child
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate()


def _wait_until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)  # real-sleep-ok: waiting on a real subprocess


def _blocked_in_wait(app: Cairn, task_id: str) -> Callable[[], bool]:
    """True once the other process owns ``task_id`` and has recorded its first step."""

    def check() -> bool:
        task = app.store.get_task(task_id)
        return (
            task is not None and task.status == "running" and 1 in app.store.load_history(task_id)
        )

    return check


def _owner_pid(task: TaskRecord | None) -> int:
    assert task is not None
    assert task.owner is not None
    owner = Owner.parse(task.owner)
    assert owner is not None
    return owner.pid


@pytest.fixture
def gates(tmp_path: Path) -> Path:
    folder = tmp_path / "gates"
    folder.mkdir()
    return folder


@pytest.fixture
def real_app(db_path: Path) -> Iterator[Cairn]:
    """A Cairn app on the test's file with the real clock and a short batch poll."""
    instance = Cairn(f"sqlite:///{db_path}", poll_interval=0.05)
    yield instance
    instance.close()


@pytest.fixture
def calls() -> Counter[str]:
    return Counter()


@pytest.fixture
def held(real_app: Cairn, calls: Counter[str]) -> TaskDef[[str], str]:
    """This process's copy of the worker's task: same name and steps, counted.
    Its step functions are not the worker's (these count their calls), so their
    fingerprints differ: on_change='keep' replays what the worker recorded."""

    def prepare(item: str) -> str:
        calls["prepare"] += 1
        return item

    def wait(item: str) -> str:
        calls["wait"] += 1
        return "done by the test"

    @real_app.task(name="held", on_change="keep")
    def held(ctx: Context, item: str) -> str:
        ctx.step("prepare", prepare, item)
        result: str = ctx.step("wait", wait, item)
        return result

    return held


def test_run_takes_over_at_once_from_a_process_that_killed_itself(
    real_app: Cairn, held: TaskDef[[str], str], calls: Counter[str], db_path: Path, gates: Path
) -> None:
    """A task left running by a SIGKILLed process is resumed at once, lease unexpired.

    The other process claims the task, records its first step and kills itself.
    Its 30 s lease is still valid, yet ``app.run`` here resumes the task right
    away, because the owner's pid is dead; the recorded step is not run again.
    """
    with _worker(db_path, gates, "suicide") as child:
        child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL
    left = real_app.store.get_task("solo")
    assert left is not None
    assert left.status == "running"
    assert _owner_pid(left) == child.pid
    assert left.lease_expires_at is not None
    assert left.lease_expires_at > datetime.now(UTC)

    started = time.monotonic()
    assert real_app.run(held, task_id="solo", item="x") == "done by the test"
    assert time.monotonic() - started < 10, "it waited for the lease instead of the pid"
    assert calls == Counter({"wait": 1}), "the recorded 'prepare' step ran again"
    done = real_app.store.get_task("solo")
    assert done is not None
    assert done.status == "completed"


def test_run_batch_takes_over_at_once_from_a_killed_process(
    real_app: Cairn, held: TaskDef[[str], str], calls: Counter[str], db_path: Path, gates: Path
) -> None:
    """A batch whose runner was SIGKILLed mid-step resumes at once in another process.

    The other process finishes task ``a``, then blocks inside task ``b``'s second
    step; the test kills it there. ``run_batch`` here takes ``b`` over without
    waiting for its 30 s lease, skips ``a`` and runs ``c``.
    """
    (gates / "a").touch()
    with _worker(db_path, gates, "a,b,c") as child:
        _wait_until(_blocked_in_wait(real_app, "b/item=b"), "the worker is inside task b")
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    held_task = real_app.store.get_task("b/item=b")
    assert held_task is not None
    assert held_task.status == "running"
    assert held_task.lease_expires_at is not None
    assert held_task.lease_expires_at > datetime.now(UTC)

    started = time.monotonic()
    report = real_app.run_batch(
        "b", held, [{"item": "a"}, {"item": "b"}, {"item": "c"}], progress=False
    )
    assert time.monotonic() - started < 10, "it waited for the lease instead of the pid"
    assert (report.ran, report.resumed, report.skipped, report.completed) == (2, 1, 1, 3)
    # b's "prepare" was recorded by the dead process; only c's runs here.
    assert calls == Counter({"prepare": 1, "wait": 2})


def _renewed_past_first_lease(app: Cairn, task_id: str, margin: float) -> Callable[[], bool]:
    """True once the owner has renewed its lease and the first lease is ``margin`` s over."""
    first = app.store.get_task(task_id)
    assert first is not None
    assert first.lease_expires_at is not None
    first_expiry = first.lease_expires_at

    def check() -> bool:
        now = app.store.get_task(task_id)
        assert now is not None
        assert now.status == "running", "the owner lost the task"
        assert now.lease_expires_at is not None
        overdue = (datetime.now(UTC) - first_expiry).total_seconds() > margin
        return overdue and now.lease_expires_at > first_expiry

    return check


def test_run_refuses_a_task_a_live_process_owns(
    real_app: Cairn, held: TaskDef[[str], str], calls: Counter[str], db_path: Path, gates: Path
) -> None:
    """While a live process holds a task and renews its lease, ``app.run`` raises TaskBusy.

    The test waits until the owner's first lease would have expired, so only the
    heartbeat keeps the task owned. Once the owner finishes, ``app.run`` returns
    the owner's recorded result without running anything.
    """
    with _worker(db_path, gates, "run", lease=LEASE) as child:
        _wait_until(_blocked_in_wait(real_app, "solo"), "the worker is inside the task")
        _wait_until(_renewed_past_first_lease(real_app, "solo", 0.2), "a lease renewal")
        with pytest.raises(TaskBusy, match="another live process") as busy:
            real_app.run(held, task_id="solo", item="x")
        assert busy.value.task_id == "solo"
        (gates / "x").touch()
        out, _ = child.communicate(timeout=60)
    assert child.returncode == 0
    assert out.strip() == f"done by {child.pid}"
    assert real_app.run(held, task_id="solo", item="x") == f"done by {child.pid}"
    assert calls == Counter()


def test_run_batch_waits_for_a_live_owner_instead_of_stealing(
    real_app: Cairn, held: TaskDef[[str], str], calls: Counter[str], db_path: Path, gates: Path
) -> None:
    """``run_batch`` waits while a live process holds a task of the batch; it never steals.

    It keeps waiting past the owner's first lease (the owner renews it), and
    returns once the owner has finished the task, having run nothing itself.
    """
    reports: list[BatchReport] = []
    with _worker(db_path, gates, "x", lease=LEASE) as child:
        _wait_until(_blocked_in_wait(real_app, "b/item=x"), "the worker is inside the task")
        runner = Thread(
            target=lambda: reports.append(
                real_app.run_batch("b", held, [{"item": "x"}], progress=False)
            ),
            daemon=True,
        )
        runner.start()
        _wait_until(_renewed_past_first_lease(real_app, "b/item=x", 0.5), "lease renewals")
        assert runner.is_alive(), "run_batch returned while another process held its task"
        assert calls == Counter(), "run_batch stole the task from its live owner"
        (gates / "x").touch()
        out, _ = child.communicate(timeout=60)
        runner.join(timeout=60)
    assert child.returncode == 0
    assert out.strip() == "1"
    assert not runner.is_alive()
    (report,) = reports
    assert (report.ran, report.completed, report.total) == (0, 1, 1)
    assert calls == Counter()
    task = real_app.store.get_task("b/item=x")
    assert task is not None
    assert task.result is not None
    assert str(child.pid) in task.result


# -- the same process --------------------------------------------------------------------------


def test_run_refuses_a_task_this_process_is_running(app: Cairn) -> None:
    """A task that this very process is running (here: one level up the stack) is
    busy; a second ``app.run`` of it raises TaskBusy naming this process."""
    refusals: list[str] = []

    def run_it_again(task_id: str) -> None:
        with pytest.raises(TaskBusy, match="running in this process") as busy:
            app.run(nested, task_id=task_id, n=1)
        refusals.append(str(busy.value.task_id))

    @app.task
    def nested(ctx: Context, n: int) -> int:
        ctx.step("again", run_it_again, ctx.task_id)
        return n

    assert app.run(nested, task_id="t", n=1) == 1
    assert refusals == ["t"]


def test_a_claim_answered_with_a_task_running_here_is_not_run_twice(
    app: Cairn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim run again after its answer was lost recognises the task it took
    by this owner and stamp (``SQLCore._write_once``). Should that read ever
    find a task another thread of this process runs under the same fence, the
    claim must not hand it out a second time: here the store answers a claim
    made from a stale read with the very task running one level up the stack,
    and the claim is refused (None) instead of starting a second runner."""
    answers: list[TaskRecord | None] = []

    def claim_it_from_a_stale_read(task_id: str) -> None:
        running = app.store.get_task(task_id)
        assert running is not None
        monkeypatch.setattr(app.store, "claim_task", lambda *args, **kwargs: running)
        stale = replace(running, status="pending", owner=None, fence=running.fence - 1)
        answers.append(claim_task(app.engine(), stale))

    @app.task
    def job(ctx: Context, n: int) -> int:
        ctx.step("claim", claim_it_from_a_stale_read, ctx.task_id)
        return n

    assert app.run(job, task_id="t", n=1) == 1
    assert answers == [None]


def test_a_task_interrupted_in_this_process_can_be_run_again_at_once(app: Cairn) -> None:
    """A task left running by an interrupted call (Ctrl-C in a REPL) is taken up again
    by the next ``app.run`` in the same process, without waiting for its lease."""
    interrupts = [KeyboardInterrupt()]

    def work() -> str:
        if interrupts:
            raise interrupts.pop()
        return "done"

    @app.task
    def job(ctx: Context, n: int) -> str:
        result: str = ctx.step("work", work)
        return result

    with pytest.raises(KeyboardInterrupt):
        app.run(job, task_id="t", n=1)
    left = app.store.get_task("t")
    assert left is not None
    assert (left.status, left.owner) == ("running", app.owner)
    assert left.lease_expires_at is not None
    assert left.lease_expires_at > app.clock.now()
    assert app.run(job, task_id="t", n=1) == "done"


def test_two_apps_on_two_stores_keep_their_tasks_of_the_same_id_apart(tmp_path: Path) -> None:
    """Two apps in one process on two stores each run a task with the same id. The
    second store's task ending must not make this process forget that it still
    runs the first store's: asked to run that one again meanwhile, the first app
    says it is running in this process (TaskBusy) instead of taking it over as
    if an interrupted call had left it, so its step runs once."""
    first = Cairn(f"sqlite:///{tmp_path / 'first.db'}")
    second = Cairn(f"sqlite:///{tmp_path / 'second.db'}")
    runs: Counter[str] = Counter()
    inside = threading.Event()
    finish = threading.Event()

    def slow(name: str) -> str:
        runs[name] += 1
        if runs[name] == 1:
            inside.set()
            assert finish.wait(30)
        return name

    @first.task(name="job")
    def job_first(ctx: Context, n: int) -> str:
        result: str = ctx.step("work", slow, "first")
        return result

    @second.task(name="job")
    def job_second(ctx: Context, n: int) -> str:
        return f"second {n}"

    results: list[str] = []
    running = Thread(target=lambda: results.append(first.run(job_first, task_id="t", n=1)))
    with first, second:
        running.start()
        assert inside.wait(30)
        assert second.run(job_second, task_id="t", n=1) == "second 1"
        with pytest.raises(TaskBusy, match="running in this process"):
            first.run(job_first, task_id="t", n=1)
        finish.set()
        running.join(30)
    assert results == ["first"]
    assert runs == Counter({"first": 1})
