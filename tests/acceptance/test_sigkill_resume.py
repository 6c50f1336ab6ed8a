"""A batch SIGKILLed in a real subprocess resumes on restart, and no step that
completed ever runs again.

``batch_script.py`` runs the batch; its step functions append one line per real
run of a step to a counts file, which is what these tests count. The store is
read back at the end to check each result against the task's recorded inputs.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from cairn.codec import codec_for
from cairn.engine.owners import Owner
from cairn.store import Store, admin, open_store
from cairn.store.records import TaskRecord
from tests.acceptance.batch_script import BATCH, STEPS, first_value, step_output, task_id

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

SCRIPT = Path(__file__).with_name("batch_script.py")
TASKS = 8
RUN_TIMEOUT_SECONDS = 60
# The restart must finish well inside the dead owner's 30 s lease, which proves
# it reclaimed the task because the pid was gone, not because the lease ran out.
RESTART_DEADLINE_SECONDS = 20
ALL_PAIRS = {(task_id(n), step) for n in range(TASKS) for step in STEPS}


@dataclass(frozen=True)
class Paths:
    store: Path
    counts: Path


@dataclass(frozen=True)
class CountLine:
    task_id: str
    step: str
    pid: int


@dataclass(frozen=True)
class Finished:
    returncode: int
    pid: int
    stdout: str
    stderr: str
    seconds: float


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    """Where this test's batch keeps its store and its counts file."""
    return Paths(store=tmp_path / "batch.db", counts=tmp_path / "counts.txt")


def start_batch(
    paths: Paths, *, concurrency: int, kill_at: str = "none", work_ms: float = 4.0
) -> subprocess.Popen[str]:
    command = [
        sys.executable,
        str(SCRIPT),
        f"--store={paths.store}",
        f"--counts={paths.counts}",
        f"--tasks={TASKS}",
        f"--concurrency={concurrency}",
        f"--work-ms={work_ms}",
        f"--kill-at={kill_at}",
    ]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen[str], started: float) -> Finished:
    stdout, stderr = process.communicate(timeout=RUN_TIMEOUT_SECONDS)
    seconds = time.monotonic() - started
    return Finished(process.returncode, process.pid, stdout, stderr, seconds)


def run_batch(paths: Paths, *, concurrency: int, kill_at: str = "none") -> Finished:
    started = time.monotonic()
    return finish(start_batch(paths, concurrency=concurrency, kill_at=kill_at), started)


def read_counts(path: Path) -> list[CountLine]:
    if not path.exists():
        return []
    lines = []
    for text in path.read_text().splitlines():
        task, step, pid = text.split(" ")
        lines.append(CountLine(task, step, int(pid)))
    return lines


@contextmanager
def opened(store_path: Path) -> Iterator[Store]:
    store = open_store(str(store_path))
    try:
        yield store
    finally:
        store.close()


def owner_pid(task: TaskRecord) -> int | None:
    owner = Owner.parse(task.owner or "")
    return None if owner is None else owner.pid


def decoded_result(task: TaskRecord) -> dict[str, Any]:
    result: dict[str, Any] = codec_for(task.codec).decode(task.result or "null")
    return result


def assert_died_by_sigkill(run: Finished) -> None:
    assert run.returncode == -signal.SIGKILL, (
        f"expected death by SIGKILL, got returncode {run.returncode}\n{run.stderr}"
    )


def assert_completed_cleanly(run: Finished) -> dict[str, Any]:
    assert run.returncode == 0, f"batch run failed ({run.returncode}):\n{run.stderr}"
    summary: dict[str, Any] = json.loads(run.stdout)
    assert summary["ok"] is True
    return summary


def assert_batch_complete(store: Store) -> None:
    assert dict(store.batch_counts(BATCH)) == {"completed": TASKS}
    assert {t.id for t in admin(store).list_tasks(batch=BATCH)} == {
        task_id(n) for n in range(TASKS)
    }


def assert_results_replay_recorded_inputs(store: Store) -> None:
    """Each result carries the now/uuid recorded in its history (recorded once,
    replayed after any kill), and every step output derives from them."""
    for n in range(TASKS):
        task = store.get_task(task_id(n))
        assert task is not None
        codec = codec_for(task.codec)
        result = decoded_result(task)
        history = sorted(store.load_history(task.id).values(), key=lambda row: row.seq)
        assert [(row.kind, row.name, row.status) for row in history] == [
            ("input", "now", "completed"),
            ("input", "uuid", "completed"),
            *(("step", step, "completed") for step in STEPS),
        ]
        recorded_now = codec.decode(history[0].output or "null")
        recorded_uuid = codec.decode(history[1].output or "null")
        assert result["n"] == n
        assert result["now"] == recorded_now
        assert result["uuid"] == str(recorded_uuid)
        value = first_value(n, str(recorded_uuid), recorded_now)
        expected = []
        for step in STEPS:
            value = step_output(value, step)
            expected.append(value)
        assert result["outputs"] == expected
        assert [codec.decode(row.output or "null") for row in history[2:]] == expected


# -- deterministic kill points -------------------------------------------------------

# (kill point, the task it interrupts mid-way or None, whether that step's
# checkpoint was committed before the kill)
KILL_POINTS = {
    "inside-step:2:s3": (2, "s3", False),
    "before-step:5:s2": (5, "s2", False),
    "after-step:4:s2": (4, "s2", True),
    "after-task:3": (3, None, True),
}


def assert_killed_state(store: Store, kill_at: str, dead_pid: int) -> None:
    """Right after the kill: the interrupted task is still "running" under the
    dead pid, with exactly the checkpoints committed before the kill."""
    index, step, committed = KILL_POINTS[kill_at]
    task = store.get_task(task_id(index))
    assert task is not None
    if step is None:
        assert task.status == "completed"
        return
    assert task.status == "running"
    assert owner_pid(task) == dead_pid
    names = {row.name for row in store.load_history(task.id).values()}
    assert (step in names) is committed


def running_lease_deadline(store: Store) -> datetime | None:
    """The earliest lease expiry among tasks the dead process left running."""
    leases = [t.lease_expires_at for t in admin(store).running_tasks(BATCH) if t.lease_expires_at]
    return min(leases, default=None)


def assert_interrupted_task_spans_both_runs(
    store: Store, kill_at: str, killed_at: datetime
) -> None:
    """Its inputs were recorded before the kill, its last steps ran after it."""
    index, step, _ = KILL_POINTS[kill_at]
    if step is None:
        return
    history = store.load_history(task_id(index))
    inputs = [row for row in history.values() if row.kind == "input"]
    assert inputs
    assert all(row.finished_at < killed_at for row in inputs)
    assert any(row.started_at > killed_at for row in history.values() if row.kind == "step")


@pytest.mark.parametrize("concurrency", [1, 3])
@pytest.mark.parametrize("kill_at", list(KILL_POINTS))
def test_batch_resumes_after_sigkill_at_a_fixed_point_and_runs_each_step_once(
    paths: Paths, kill_at: str, concurrency: int
) -> None:
    """SIGKILLed inside a step, before a step, between two steps or between two
    tasks, the batch restarted at once finishes every task, and every step ran
    exactly once: a step killed inside its function never wrote its count line,
    so its one line comes from the resumed run. The restart reclaims the dead
    process's running tasks immediately, long before their lease would expire."""
    first = run_batch(paths, concurrency=concurrency, kill_at=kill_at)
    assert_died_by_sigkill(first)
    killed_at = datetime.now(UTC)
    assert Path(f"{paths.store}.killed").exists()
    assert all(line.pid == first.pid for line in read_counts(paths.counts))
    with opened(paths.store) as store:
        assert_killed_state(store, kill_at, first.pid)
        lease_deadline = running_lease_deadline(store)

    second = run_batch(paths, concurrency=concurrency, kill_at=kill_at)
    summary = assert_completed_cleanly(second)
    assert second.seconds < RESTART_DEADLINE_SECONDS
    if lease_deadline is not None:
        assert datetime.now(UTC) < lease_deadline, "the restart waited for the lease"
    if KILL_POINTS[kill_at][1] is not None:
        assert summary["resumed"] >= 1  # the interrupted task went on from its history

    counted = Counter((line.task_id, line.step) for line in read_counts(paths.counts))
    assert set(counted) == ALL_PAIRS
    assert {pair: n for pair, n in counted.items() if n != 1} == {}
    with opened(paths.store) as store:
        assert_batch_complete(store)
        assert_results_replay_recorded_inputs(store)
        assert_interrupted_task_spans_both_runs(store, kill_at, killed_at)


# -- kills from outside at random moments ----------------------------------------------

OUTSIDE_KILLS = 5
OUTSIDE_SEED = 20240611
# Slower steps than above, so a kill threshold is always reached while work is
# still left: at most 5 kills x 4 new lines = 20 of the 32 steps are ever waited for.
OUTSIDE_WORK_MS = 30.0
POLL_SECONDS = 0.002


def wait_for_count_lines(paths: Paths, process: subprocess.Popen[str], at_least: int) -> None:
    deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
    while len(read_counts(paths.counts)) < at_least:
        if process.poll() is not None:
            _, stderr = process.communicate()
            pytest.fail(f"batch exited ({process.returncode}) before the kill:\n{stderr}")
        if time.monotonic() > deadline:
            pytest.fail(f"the counts file never reached {at_least} lines")
        time.sleep(POLL_SECONDS)  # real-sleep-ok: polling a real subprocess's progress


def kill_at_random_moment(paths: Paths, rng: random.Random, concurrency: int) -> Finished:
    """Start the batch, wait for a few more steps to finish plus a random sliver
    of a step's work, and SIGKILL it from outside."""
    threshold = len(read_counts(paths.counts)) + rng.randint(1, 4)
    started = time.monotonic()
    process = start_batch(paths, concurrency=concurrency, work_ms=OUTSIDE_WORK_MS)
    wait_for_count_lines(paths, process, threshold)
    time.sleep(rng.uniform(0, OUTSIDE_WORK_MS / 1000))  # real-sleep-ok: a random kill moment
    os.kill(process.pid, signal.SIGKILL)
    return finish(process, started)


def last_line_of_each(lines: list[CountLine], pids: set[int]) -> set[CountLine]:
    last: dict[int, CountLine] = {}
    for line in lines:
        if line.pid in pids:
            last[line.pid] = line
    return set(last.values())


@pytest.mark.parametrize("concurrency", [1, 3])
def test_batch_survives_repeated_sigkills_from_outside_at_random_moments(
    paths: Paths, concurrency: int
) -> None:
    """Killed from outside five times at seeded random moments, then run to the
    end, the batch completes with every step run and every result consistent.

    A kill from outside can land in the tiny window after a step's function has
    finished (its count line is written) and before cairn has committed its
    checkpoint; that step then runs again after the restart. This window is
    inherent to running effects durably, so here a step may appear twice, but
    only that way: the script lets one step at a time be inside the window, so
    each kill adds at most one duplicate, and the duplicated step's first line
    is the last line its killed process ever wrote. Anything else would mean
    cairn re-ran a step whose checkpoint was already committed."""
    rng = random.Random(OUTSIDE_SEED + concurrency)
    killed_pids: set[int] = set()
    for _ in range(OUTSIDE_KILLS):
        run = kill_at_random_moment(paths, rng, concurrency)
        assert_died_by_sigkill(run)
        killed_pids.add(run.pid)

    final = run_batch(paths, concurrency=concurrency)
    assert_completed_cleanly(final)
    assert final.seconds < RESTART_DEADLINE_SECONDS

    lines = read_counts(paths.counts)
    counted = Counter((line.task_id, line.step) for line in lines)
    assert set(counted) == ALL_PAIRS
    duplicates = {pair: n for pair, n in counted.items() if n > 1}
    extra_runs = sum(duplicates.values()) - len(duplicates)
    print(
        f"\nconcurrency {concurrency}: {extra_runs} duplicate step run(s) in {OUTSIDE_KILLS} kills"
    )
    assert extra_runs <= OUTSIDE_KILLS
    in_window = last_line_of_each(lines, killed_pids)
    for pair in duplicates:
        *rerun, _kept = [line for line in lines if (line.task_id, line.step) == pair]
        for line in rerun:
            assert line in in_window, f"{pair} ran again though its checkpoint was committed"
    with opened(paths.store) as store:
        assert_batch_complete(store)
        assert_results_replay_recorded_inputs(store)
