"""crash_at_every_step: every example survives, and broken workflows are caught.

Each crash case runs in new processes (forks of a process that imported only
cairn), so module globals do not survive a crash, as in production. The broken
workflows live in ``broken_workflows.py``; every example under ``examples/``
declares how to crash-check it in its ``CRASH_CHECK`` dict.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from cairn.testing import CleanRunFailed, CrashReport, crash_at_every_step
from cairn.testing.plugin import CrashCheck

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
BROKEN = "tests.acceptance.broken_workflows"
LEDGER_EFFECTS = f"{BROKEN}:ledger_entries"
SCRIPT_TIMEOUT_SECONDS = 60


def failing(report: CrashReport) -> list[str]:
    """The labels of the boundaries whose case failed."""
    return [case.boundary.label() for case in report.failures]


def example_check(path: Path) -> dict[str, Any]:
    """The example's CRASH_CHECK, read from its source without importing it (nor
    the framework it imports, which costs seconds): a literal dict at top level."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "CRASH_CHECK" for target in node.targets
        ):
            check: dict[str, Any] = ast.literal_eval(node.value)
            return check
    raise AssertionError(f"{path} declares no literal CRASH_CHECK at top level")


def test_there_is_an_example_to_check() -> None:
    """examples/ holds at least the review example, so the parametrised check below
    cannot pass by checking nothing."""
    assert ROOT / "examples" / "review_apps.py" in EXAMPLES


# Each case forks twice; an example whose framework is slow to import preloads it
# (CRASH_CHECK["preload"]), but on a loaded machine the slowest example still
# needs more than the default 120 s.
@pytest.mark.timeout(400)
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.stem)
def test_every_example_survives_a_crash_at_every_boundary(
    example: Path, cairn_crash_check: CrashCheck
) -> None:
    """Each example, crashed at each boundary of its clean run and resumed in a
    new process, completes with the clean run's result and outside effects, and
    every step and operation function ran once (twice only in a step's
    at-least-once window)."""
    check = example_check(example)
    if "crash_tested_by" in check:
        # Not a cairn task (a framework runs it): its own SIGKILL test, which
        # must exist, crash-tests it.
        assert (ROOT / check["crash_tested_by"]).is_file(), check
        pytest.skip(f"{check['why']}; crash-tested by {check['crash_tested_by']}")
    effects = check.get("effects")
    report = cairn_crash_check(
        f"{example}:{check['task']}",
        check.get("kwargs", {}),
        effects=None if effects is None else f"{example}:{effects}",
        preload=check.get("preload", ()),
    )
    points = {case.boundary.point for case in report.cases}
    assert {"before_step", "step_returned", "after_step", "after_task"} <= points
    assert "boundaries, all survived" in report.table()
    operations = {c.boundary.name for c in report.cases if c.boundary.point == "after_claim"}
    for key in operations:
        covered = [c.boundary.point for c in report.cases if c.boundary.name == key]
        assert covered == ["after_claim", "after_act", "after_record"]
    for case in report.cases:
        twice = {c.call.name for c in case.calls if c.count == 2}
        assert twice == ({case.boundary.name} if case.boundary.point == "step_returned" else set())


CHAIN = textwrap.dedent(
    """
    from cairn import Cairn, Context

    app = Cairn()

    def add_one(value):
        return value + 1

    @app.task
    def chain(ctx: Context, n: int) -> int:
        value = 0
        for number in range(1, n + 1):
            value = ctx.step(f"s{number}", add_one, value)
        return value
    """
)


def test_adding_a_step_to_the_workflow_adds_its_cases(tmp_path: Path) -> None:
    """The cases come from the clean run: a workflow with one more step gets
    that step's three boundaries as three more cases, with nothing to declare."""
    module = tmp_path / "chain_workflow.py"
    module.write_text(CHAIN)
    one = crash_at_every_step(f"{module}:chain", {"n": 1})
    two = crash_at_every_step(f"{module}:chain", {"n": 2})
    assert one.ok, one.table()
    assert two.ok, two.table()
    assert len(one.cases) == 4
    assert len(two.cases) == 7
    new = {c.boundary.label() for c in two.cases} - {c.boundary.label() for c in one.cases}
    assert new == {"before_step 's2'", "step_returned 's2'", "after_step 's2'"}


def test_a_step_reading_a_variable_that_replay_does_not_restore_is_caught() -> None:
    """stale_variable passes a value between steps through a module global. A crash
    once 'fetch' is recorded (and before 'analyze' is) makes the resumed process
    replay 'fetch' without calling it, so 'analyze' finds the global empty: those
    cases fail, and say to pass values through return values."""
    report = crash_at_every_step(f"{BROKEN}:stale_variable", {"item": "abc"})
    assert not report.ok
    assert failing(report) == [
        "after_step 'fetch'",
        "before_step 'analyze'",
        "step_returned 'analyze'",
    ]
    for case in report.failures:
        assert case.resumed == "failed (KeyError)"
        assert "replay does not restore" in case.verdict


def test_an_unkeyed_side_effect_inside_a_step_is_caught() -> None:
    """unkeyed_charge writes to the ledger inside a plain step. A crash after the
    charge, before the step's result is committed, charges twice on resume: the
    effects differ from the clean run's, and the verdict names the step and
    ctx.once."""
    report = crash_at_every_step(
        f"{BROKEN}:unkeyed_charge", {"item": "abc"}, effects=LEDGER_EFFECTS
    )
    assert failing(report) == ["step_returned 'charge'"]
    (case,) = report.failures
    assert '{"charge/abc": 2}' in case.verdict
    assert "'charge'" in case.verdict
    assert "ctx.once" in case.verdict


def test_an_operation_without_reconcile_is_reported_in_doubt() -> None:
    """apply_without_reconcile charges through ctx.once with the default policy. A
    crash between the claim and the record leaves the key in doubt: the resumed
    task stops, and the verdict says to give it reconcile= or on_doubt."""
    report = crash_at_every_step(
        f"{BROKEN}:apply_without_reconcile", {"item": "abc"}, effects=LEDGER_EFFECTS
    )
    assert failing(report) == ["after_claim 'charge/abc'", "after_act 'charge/abc'"]
    for case in report.failures:
        assert case.resumed == "in doubt"
        assert "reconcile=" in case.verdict
        assert "on_doubt='retry'" in case.verdict


def test_a_branch_on_an_unrecorded_outside_read_is_caught() -> None:
    """branch_on_outside_state names its first step after a file its step writes.
    After a crash once the file exists, replay asks for another step than the
    record holds (or runs a step the clean run never ran): those cases fail, and
    the replay failure says to record the value."""
    report = crash_at_every_step(f"{BROKEN}:branch_on_outside_state", {"item": "abc"})
    assert failing(report) == [
        "step_returned 'first'",
        "after_step 'first'",
        "before_step 'finish'",
        "step_returned 'finish'",
        "after_step 'finish'",
    ]
    window, replayed = report.failures[0], report.failures[1]
    assert "step 'again' (#1) ran 1 times, expected 0" in window.verdict
    assert replayed.resumed == "failed (NonDeterminismError)"
    assert "ctx.record()" in replayed.verdict


def test_fresh_interpreters_give_the_same_verdicts_as_forked_runs() -> None:
    """Forking from a process that imported only cairn is an optimisation: with a
    new interpreter for every run, the broken workflow fails at the same cases."""
    forked = crash_at_every_step(f"{BROKEN}:stale_variable", {"item": "xy"})
    fresh = crash_at_every_step(f"{BROKEN}:stale_variable", {"item": "xy"}, fresh_interpreters=True)
    assert failing(fresh) == failing(forked)
    assert [c.resumed for c in fresh.cases] == [c.resumed for c in forked.cases]


def test_the_fixture_fails_the_test_with_the_table(cairn_crash_check: CrashCheck) -> None:
    """cairn_crash_check fails the calling test, and the failure message is the
    table: every boundary, with the failing one marked FAIL and explained."""
    with pytest.raises(pytest.fail.Exception) as failure:
        cairn_crash_check(f"{BROKEN}:charge_in_a_step", {"item": "q"}, effects=LEDGER_EFFECTS)
    message = str(failure.value)
    assert "4 boundaries, 1 FAILED" in message
    assert "step_returned 'charge'" in message
    assert "FAIL: outside effects differ" in message
    assert message.count("\n") > 4


FIXED_STORE = textwrap.dedent(
    """
    from cairn import Cairn, Context

    app = Cairn("sqlite:///fixed.db")

    @app.task
    def job(ctx: Context) -> int:
        return ctx.step("one", int, "1")
    """
)


def test_an_app_that_ignores_cairn_store_is_refused_with_the_fix(tmp_path: Path) -> None:
    """A task whose app names its own store cannot be given a fresh store per
    case: the clean run stops with an error that says to use Cairn() and
    CAIRN_STORE."""
    module = tmp_path / "fixed_store.py"
    module.write_text(FIXED_STORE)
    with pytest.raises(CleanRunFailed, match="CAIRN_STORE"):
        crash_at_every_step(f"{module}:job")


def test_the_review_example_runs_as_a_script_and_applies_each_change_once(
    tmp_path: Path,
) -> None:
    """``python examples/review_apps.py`` reviews the apps in its workdir; run
    again, it finds everything done and the platform gets no second change."""
    command = [
        sys.executable,
        str(ROOT / "examples" / "review_apps.py"),
        "--apps",
        "3",
        "--workdir",
        str(tmp_path / "run"),
    ]
    for _ in range(2):
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=SCRIPT_TIMEOUT_SECONDS, check=False
        )
        assert done.returncode == 0, done.stderr
        assert "3/3 apps reviewed" in done.stdout
    ledger = (tmp_path / "run" / "ad-platform-ledger.jsonl").read_text().splitlines()
    assert len(ledger) == 3


COUNTING_LIBRARY = textwrap.dedent(
    """
    # A library whose state a run changes: each import starts a new list.
    calls = []
    """
)
COUNTING_TASK = textwrap.dedent(
    """
    import counting_library
    from cairn import Cairn, Context

    app = Cairn()

    def note(label):
        # How many times this process has run the step: 1, unless the list was kept.
        counting_library.calls.append(label)
        return counting_library.calls.count(label)

    @app.task
    def job(ctx: Context) -> list[int]:
        return [ctx.step("first", note, "a"), ctx.step("second", note, "b")]
    """
)
THREADED_LIBRARY = textwrap.dedent(
    """
    import threading

    # A library that starts a thread at import: a fork would not have it.
    stop = threading.Event()
    threading.Thread(target=stop.wait, name="library-worker", daemon=True).start()
    """
)


def test_a_preloaded_library_starts_fresh_in_every_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A library preloaded once by the forking process is, in every run, as it was
    right after its import: each step appends its name to the library's list and
    counts it, 1 in the clean run and in every crashed-and-resumed case (a run
    that kept an earlier run's list would count 2 and fail its case), with the
    same verdicts as without preload."""
    (tmp_path / "counting_library.py").write_text(COUNTING_LIBRARY)
    (tmp_path / "counting_task.py").write_text(COUNTING_TASK)
    monkeypatch.syspath_prepend(str(tmp_path))
    preloaded = crash_at_every_step("counting_task:job", preload=["counting_library"])
    plain = crash_at_every_step("counting_task:job")
    assert preloaded.ok, preloaded.table()
    assert json.loads(preloaded.clean_result) == json.loads(plain.clean_result) == [1, 1]
    assert len(preloaded.cases) == len(plain.cases) == 7
    assert [c.resumed for c in preloaded.cases] == [c.resumed for c in plain.cases]


def test_a_preload_that_starts_a_thread_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forked child keeps only the thread that forked, so a library that starts
    a thread at import cannot be preloaded: the check stops before any run, with
    an error that names the thread and says to leave the module out."""
    (tmp_path / "threaded_library.py").write_text(THREADED_LIBRARY)
    (tmp_path / "counting_library.py").write_text(COUNTING_LIBRARY)
    (tmp_path / "counting_task.py").write_text(COUNTING_TASK)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RuntimeError, match=r"library-worker.*leave it out of preload="):
        crash_at_every_step("counting_task:job", preload=["threaded_library"])
    assert not list(tmp_path.glob("**/clean.events"))
