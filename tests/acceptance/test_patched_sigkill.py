"""``ctx.patched`` across SIGKILL, with real processes on one store.

``patch_script.py`` runs task ``review`` on the old code (no patch) or the new
code (``ctx.patched("stricter-parser")`` before parsing), and SIGKILLs itself
where the test says. Its marks file records every real step run and every
answer ``ctx.patched`` gave.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.acceptance

SCRIPT = Path(__file__).with_name("patch_script.py")
TIMEOUT_SECONDS = 60


def run(
    tmp_path: Path, code: str, *tasks: str, kill_before: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the script once to its end (or its SIGKILL)."""
    command = [
        sys.executable,
        str(SCRIPT),
        f"--store={tmp_path / 'patch.db'}",
        f"--marks={tmp_path / 'marks.txt'}",
        f"--code={code}",
        *(f"--task={task}" for task in tasks),
    ]
    if kill_before is not None:
        command.append(f"--kill-before={kill_before}")
    return subprocess.run(
        command, capture_output=True, text=True, timeout=TIMEOUT_SECONDS, check=False
    )


def marks(tmp_path: Path) -> list[str]:
    return (tmp_path / "marks.txt").read_text(encoding="utf-8").splitlines()


def test_patched_is_false_for_a_task_killed_past_it_and_true_for_one_killed_after_it(
    tmp_path: Path,
) -> None:
    """Task old-1 is SIGKILLed on the old code after parsing; task new-2 is
    SIGKILLed on the new code right after ctx.patched recorded True. A new
    process on the new code finishes both and a fresh task: old-1 gets False
    and keeps its old parse (not run again), new-2 gets True again, the fresh
    task True; no step that completed runs twice."""
    old = run(tmp_path, "old", "old-1", kill_before="report")
    assert old.returncode == -signal.SIGKILL, old.stderr
    new = run(tmp_path, "new", "new-2", kill_before="parse-v2")
    assert new.returncode == -signal.SIGKILL, new.stderr
    assert marks(tmp_path) == [
        "old-1 step fetch",
        "old-1 step parse",
        "new-2 step fetch",
        "new-2 patched True",
    ]
    final = run(tmp_path, "new", "old-1", "new-2", "fresh-3")
    assert final.returncode == 0, final.stderr
    assert json.loads(final.stdout) == {
        "old-1": "lenient: page of old-1",
        "new-2": "strict: page of new-2",
        "fresh-3": "strict: page of fresh-3",
    }
    answers = [line for line in marks(tmp_path) if " patched " in line]
    assert answers == [
        "new-2 patched True",
        "old-1 patched False",
        "new-2 patched True",
        "fresh-3 patched True",
    ]
    steps = Counter(line.split()[2] for line in marks(tmp_path) if " step " in line)
    assert steps == Counter({"fetch": 3, "parse": 1, "parse-v2": 2, "report": 3})
