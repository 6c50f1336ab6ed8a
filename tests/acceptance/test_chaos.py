"""``cairn chaos``: SIGKILL a batch at random moments, resume it, audit the store.

The CI run is the first test: the built-in batch, 50 real SIGKILLs with a fixed
seed, on SQLite, through the real CLI. The others prove the auditor works: a
store that drops its last commit, an effect repeated on every start and a
target that cannot start must each fail the run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cairn.chaos import run_chaos

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

CAIRN = str(Path(sys.executable).with_name("cairn"))
ROOT = Path(__file__).resolve().parents[2]
CI_KILLS = 50
CI_SEED = 20240611
TARGETS = "tests.acceptance.chaos_targets"
CLI_TIMEOUT_SECONDS = 110


def chaos(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``cairn chaos`` with a workdir under ``tmp_path``, run from the project root."""
    command = [CAIRN, "chaos", "--workdir", str(tmp_path / "chaos"), *args]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=CLI_TIMEOUT_SECONDS,
        check=False,
    )


def test_fifty_kills_of_the_built_in_batch_lose_nothing_and_repeat_no_effect(
    tmp_path: Path,
) -> None:
    """The CI chaos run: 50 SIGKILLs of the built-in batch on SQLite (seed fixed),
    each followed by a restart. Every kill is delivered whatever the machine's
    speed (the runner grows the batch if it might finish early). Every restart
    makes progress, the batch completes, no recorded step is lost or run again,
    and no operation's effect happens twice: one apply per task."""
    done = chaos(tmp_path, "--kills", str(CI_KILLS), "--seed", str(CI_SEED), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    assert report["kills"] == CI_KILLS
    assert report["restarts"] == CI_KILLS
    assert report["restart_success_rate"] == 1.0
    assert report["lost"] == []
    assert report["duplicate_effects"] == {}
    assert report["incomplete"] == []
    assert report["unsettled_operations"] == []
    assert report["effects"] == report["tasks"] >= 8 * CI_KILLS  # one apply per task
    print(  # the numbers for the CI log
        f"chaos: {report['kills']} kills, restart success {report['restart_success_rate']:.0%}, "
        f"redundant step runs {report['redundant_steps']}, lost {len(report['lost'])}, "
        f"wall-clock {report['wall_clock']:.1f} s"
    )


def test_fifty_kills_on_postgresql_lose_nothing_and_repeat_no_effect(
    tmp_path: Path, pg_url: str
) -> None:
    """The same CI chaos run on PostgreSQL: 50 SIGKILLs of the built-in batch on a
    database of its own (seed fixed). Every restart makes progress, the batch
    completes, nothing recorded is lost or run again, no effect happens twice."""
    done = chaos(
        tmp_path, "--kills", str(CI_KILLS), "--seed", str(CI_SEED), "--store", pg_url, "--json"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    assert report["kills"] == CI_KILLS
    assert report["restart_success_rate"] == 1.0
    assert report["lost"] == []
    assert report["duplicate_effects"] == {}
    assert report["incomplete"] == []
    assert report["unsettled_operations"] == []
    assert report["effects"] == report["tasks"] >= 8 * CI_KILLS
    print(
        f"chaos (PostgreSQL): {report['kills']} kills, restart success "
        f"{report['restart_success_rate']:.0%}, redundant step runs "
        f"{report['redundant_steps']}, wall-clock {report['wall_clock']:.1f} s"
    )


def test_a_store_that_drops_its_last_commit_is_caught(tmp_path: Path) -> None:
    """A store that loses the step it committed last whenever the process dies:
    chaos sees steps that were recorded completed vanish or run again, lists
    them, and exits 1."""
    done = chaos(tmp_path, "--target", f"{TARGETS}:lossy_batch", "--kills", "5", "--seed", "3")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED" in done.stdout
    lost = [line for line in done.stdout.splitlines() if line.startswith("lost: ")]
    assert lost
    assert all("vanished" in line or "ran again" in line for line in lost)


def test_an_effect_repeated_on_every_restart_is_a_duplicate(tmp_path: Path) -> None:
    """A target that posts its report outside ctx.once posts it again on each
    restart: chaos counts the key as a duplicate and the run is not ok."""
    report = run_chaos(
        f"{TARGETS}:report_on_every_start", kills=2, seed=5, workdir=tmp_path / "chaos"
    )
    assert report.duplicate_effects == {"daily-report/2024-06-11": 3}
    assert report.lost == ()
    assert not report.ok
    assert report.exit_code == 1


def test_a_target_that_fails_by_itself_fails_the_run_with_its_error(tmp_path: Path) -> None:
    """A target that raises before doing anything ends the chaos run at once; the
    report shows the run's own error, and exits 1."""
    report = run_chaos(f"{TARGETS}:always_fails", kills=3, seed=1, workdir=tmp_path / "chaos")
    assert report.kills == 0
    assert [run.number for run in report.crashed_runs] == [0]
    assert not report.ok
    assert "cannot reach the batch's data source" in report.table()


def test_the_same_seed_gives_the_same_kill_delays(tmp_path: Path) -> None:
    """The seed picks the delays: two runs with seed 11 kill after the same
    delays, and seed 12 after other ones."""

    def delays(seed: int, name: str) -> list[float | None]:
        report = run_chaos(kills=3, seed=seed, tasks=20, workdir=tmp_path / name)
        assert report.ok, report.table()
        return [run.delay for run in report.runs if run.killed]

    first = delays(11, "a")
    assert len(first) == 3
    assert delays(11, "b") == first
    assert delays(12, "c") != first


def test_tasks_is_refused_for_a_target_of_ones_own(tmp_path: Path) -> None:
    """--tasks sizes the built-in batch only: with --target it exits 2 and says so."""
    done = chaos(tmp_path, "--target", f"{TARGETS}:lossy_batch", "--tasks", "5")
    assert done.returncode == 2
    assert "built-in batch only" in done.stderr


def test_a_target_that_names_no_function_is_refused(tmp_path: Path) -> None:
    """A --target without ``module:function`` form exits 2 with one error line."""
    done = chaos(tmp_path, "--target", "just_a_module", "--kills", "1")
    assert done.returncode == 2
    assert "package.module:name" in done.stderr


def test_every_requested_kill_is_delivered_even_to_a_batch_too_small_for_them(
    tmp_path: Path,
) -> None:
    """Asked for 6 kills of a built-in batch of 4 tasks (a round finishes several),
    the runner grows the batch before a round that might otherwise find nothing
    left to interrupt, and says so: all 6 kills land in runs with work in hand,
    and every task's effect still happens exactly once."""
    report = run_chaos(kills=6, tasks=4, seed=7, workdir=tmp_path / "chaos")
    assert report.ok, report.table()
    assert report.kills == 6
    assert any("grew the batch from 4 to" in note for note in report.notes), report.notes
    assert report.tasks > 4
    assert report.effects == report.tasks
    assert report.duplicate_effects == {}
