"""Fault plans: a crash injected at a named boundary, once or every time.

In-process faults raise ``InjectedCrash``; the same app then resumes the task,
as a restarted process would. The process-ending actions run in real
subprocesses, with a marker directory so a fault that fired stays fired.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cairn import Cairn, Context, Retry, TaskDef, op_key
from cairn.engine.run import no_fault
from cairn.testing import Fault, FaultPlan, Fired, InjectedCrash, clear_fault_hook

SUBPROCESS_TIMEOUT_SECONDS = 60


class Calls:
    """Counts how often each step or operation function really ran."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def step(self, name: str, value: Any) -> Any:
        self.counts[name] += 1
        return value

    def fn(self, name: str) -> Any:
        return lambda *args: self.step(name, args[-1] if args else None)


def three_steps(app: Cairn, calls: Calls) -> TaskDef[..., list[int]]:
    @app.task
    def pipeline(ctx: Context, start: int) -> list[int]:
        a = ctx.step("a", calls.fn("a"), start + 1)
        b = ctx.step("b", calls.fn("b"), a + 1)
        c = ctx.step("c", calls.fn("c"), b + 1)
        return [a, b, c]

    return pipeline


def test_a_fault_after_a_step_crashes_there_and_the_resume_skips_what_was_recorded(
    app: Cairn,
) -> None:
    """A fault at after_step 'b' raises InjectedCrash once b is committed; running
    the task again replays a and b from the record and runs only c."""
    calls = Calls()
    pipeline = three_steps(app, calls)
    plan = FaultPlan([Fault("after_step", step="b")]).install(app)
    with pytest.raises(InjectedCrash) as crash:
        app.run(pipeline, start=0)
    assert (crash.value.point, crash.value.name, crash.value.seq) == ("after_step", "b", 2)
    assert plan.fired == [Fired(0, "after_step", "pipeline/start=0", 2, "b")]
    assert app.run(pipeline, start=0) == [1, 2, 3]
    assert calls.counts == {"a": 1, "b": 1, "c": 1}


def test_injected_crash_escapes_except_exception_in_user_code(app: Cairn) -> None:
    """InjectedCrash is a BaseException: a task that wraps its steps in
    ``except Exception`` cannot swallow it and carry on, as with a real crash."""
    calls = Calls()

    @app.task
    def careless(ctx: Context) -> str:
        try:
            ctx.step("risky", calls.fn("risky"), "x")
        except Exception:  # noqa: BLE001 - the agent-style catch-all a crash gets through
            return "swallowed"
        return "done"

    FaultPlan([Fault("before_step", step="risky")]).install(app)
    with pytest.raises(InjectedCrash):
        app.run(careless)
    assert not issubclass(InjectedCrash, Exception)
    assert calls.counts == {}


def test_a_fault_by_position_fires_at_that_seq_whatever_the_step_is_called(app: Cairn) -> None:
    """seq= picks the history position: the crash lands before the third entry."""
    calls = Calls()
    pipeline = three_steps(app, calls)
    FaultPlan([Fault("before_step", seq=3)]).install(app)
    with pytest.raises(InjectedCrash) as crash:
        app.run(pipeline, start=10)
    assert crash.value.name == "c"
    assert calls.counts == {"a": 1, "b": 1}


def test_a_fault_at_step_returned_makes_that_step_run_twice(app: Cairn) -> None:
    """A crash after a step's function returned, before its result is committed,
    is the at-least-once window: on resume that step runs again, and only it."""
    calls = Calls()
    pipeline = three_steps(app, calls)
    FaultPlan([Fault("step_returned", step="b")]).install(app)
    with pytest.raises(InjectedCrash):
        app.run(pipeline, start=0)
    assert app.run(pipeline, start=0) == [1, 2, 3]
    assert calls.counts == {"a": 1, "b": 2, "c": 1}


def test_times_none_fires_every_time_and_times_two_fires_twice(app: Cairn) -> None:
    """times=None crashes at each matching boundary; times=2 stops after two."""
    calls = Calls()
    pipeline = three_steps(app, calls)
    plan = FaultPlan([Fault("before_step", step="c", times=2)]).install(app)
    for _ in range(2):
        with pytest.raises(InjectedCrash):
            app.run(pipeline, start=0)
    assert app.run(pipeline, start=0) == [1, 2, 3]
    assert len(plan.fired) == 2

    always = FaultPlan([Fault("after_step", step="a", times=None)])
    for run in range(5):
        always("after_step", f"t{run}", 1, "b")  # another step: never fires
        with pytest.raises(InjectedCrash):
            always("after_step", f"t{run}", 1, "a")
    assert len(always.fired) == 5


def test_skip_lets_matching_boundaries_pass_before_firing(app: Cairn) -> None:
    """skip=1 on a step retried in place fires at its second attempt, not its first."""
    attempts: list[int] = []

    def flaky() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise ValueError("first attempt fails")
        return "ok"

    @app.task
    def retried(ctx: Context) -> str:
        return ctx.step("flaky", flaky, retry=Retry(attempts=3, initial_delay=0))

    plan = FaultPlan([Fault("before_step", step="flaky", skip=1)]).install(app)
    with pytest.raises(InjectedCrash):
        app.run(retried)
    assert len(attempts) == 1  # the crash came before the second attempt's call
    assert app.run(retried) == "ok"
    assert [fired.point for fired in plan.fired] == ["before_step"]


def test_an_operation_fault_selects_by_key_and_reconcile_keeps_it_once(app: Cairn) -> None:
    """key= picks an operation; a crash after it acted, before its result was
    recorded, is settled by reconcile on resume: the function ran once."""
    ledger: list[str] = []

    def charge(key: str, amount: int) -> dict[str, Any]:
        ledger.append(key)
        return {"charged": amount}

    def find(key: str) -> dict[str, Any] | None:
        return {"charged": 5} if key in ledger else None

    @app.task
    def pay(ctx: Context, item: str) -> dict[str, Any]:
        return ctx.once(op_key("pay", item), charge, 5, reconcile=find)

    plan = FaultPlan([Fault("after_act", key="pay/i1")]).install(app)
    with pytest.raises(InjectedCrash):
        app.run(pay, item="i1")
    assert app.run(pay, item="i1") == {"charged": 5}
    assert ledger == ["pay/i1"]
    assert plan.fired[0].name == "pay/i1"


def test_a_fault_for_one_task_leaves_the_others_of_a_batch_alone(app: Cairn) -> None:
    """task_id= narrows a fault to one task: in a batch only that task crashes
    (the batch run stops with it), and the rerun completes every task."""
    calls = Calls()
    pipeline = three_steps(app, calls)
    plan = FaultPlan([Fault("after_step", step="b", task_id="nums/start=2")]).install(app)
    items = [{"start": n} for n in range(4)]
    with pytest.raises(InjectedCrash):
        app.run_batch("nums", pipeline, items, concurrency=1, progress=False)
    report = app.run_batch("nums", pipeline, items, concurrency=1, progress=False)
    assert report.ok
    assert [fired.task_id for fired in plan.fired] == ["nums/start=2"]
    assert calls.counts == {"a": 4, "b": 4, "c": 4}


def test_install_and_clear_swap_the_apps_hook(app: Cairn) -> None:
    """install makes the plan the app's fault hook; clear_fault_hook restores the no-op."""
    plan = FaultPlan()
    assert plan.install(app) is plan
    assert app.fault_hook is plan
    clear_fault_hook(app)
    assert app.fault_hook is no_fault


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        (lambda: Fault("during_lunch"), "unknown fault point"),
        (lambda: Fault("after_step", key="k"), "not an operation point"),
        (lambda: Fault("after_act", step="s"), "operation point"),
        (lambda: Fault("after_step", action="explode"), "unknown fault action"),  # type: ignore[arg-type]
        (lambda: Fault("after_step", times=0), "times must be"),
    ],
)
def test_a_fault_that_cannot_match_anything_is_refused(fault: Any, message: str) -> None:
    """Faults are checked when built: an unknown point or action, a key on a step
    point, a step on an operation point, or times=0 raise ValueError."""
    with pytest.raises(ValueError, match=message):
        fault()


def test_a_marker_dir_keeps_a_once_fault_fired_for_the_next_plan(tmp_path: Path) -> None:
    """With a marker directory, a times=1 fault that fired in one plan does not
    fire in a second plan built the same way (standing for the next process)."""
    first = FaultPlan([Fault("after_step", step="a")], marker_dir=tmp_path / "markers")
    with pytest.raises(InjectedCrash):
        first("after_step", "t", 1, "a")
    second = FaultPlan([Fault("after_step", step="a")], marker_dir=tmp_path / "markers")
    second("after_step", "t", 1, "a")
    assert second.fired == []
    assert second.fired_count(0) == 1


SCRIPT = textwrap.dedent(
    """
    import sys
    from collections import Counter
    from pathlib import Path

    from cairn import Cairn
    from cairn.testing import Fault, FaultPlan

    store, markers, action, counts = sys.argv[1:5]
    app = Cairn(f"sqlite:///{store}")

    def step(name):
        with open(counts, "a") as out:
            out.write(name + "\\n")
        return name

    @app.task
    def job(ctx):
        return [ctx.step(name, step, name) for name in ("one", "two", "three")]

    FaultPlan([Fault("after_step", step="two", action=action)], marker_dir=markers).install(app)
    with app:
        print(app.run(job))
    """
)


@pytest.mark.parametrize(("action", "returncode"), [("exit", 137), ("sigkill", -signal.SIGKILL)])
def test_a_process_ending_fault_kills_the_process_once_and_the_rerun_completes(
    tmp_path: Path, action: str, returncode: int
) -> None:
    """action="exit" ends the process with os._exit(137), "sigkill" with SIGKILL,
    right after step two is committed. The marker file keeps the fault fired, so
    the same program run again completes, running only step three."""
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    counts = tmp_path / "counts.txt"
    command = [
        sys.executable,
        str(script),
        str(tmp_path / "job.db"),
        str(tmp_path / "markers"),
        action,
        str(counts),
    ]
    first = subprocess.run(
        command, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_SECONDS, check=False
    )
    assert first.returncode == returncode, first.stderr
    assert len(list((tmp_path / "markers").iterdir())) == 1
    second = subprocess.run(
        command, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_SECONDS, check=False
    )
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == "['one', 'two', 'three']"
    assert counts.read_text().split() == ["one", "two", "three"]
