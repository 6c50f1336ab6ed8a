"""The examples run from any directory, offline, with only cairn installed.

Each runs in a subprocess whose working directory is a fresh temporary one,
so nothing under the repository root (``tests``, ``examples``) is importable
unless the example makes it so itself. The simulated services come from
``cairn.testing.servers``, which ships with cairn.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.acceptance

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
RUN_TIMEOUT_SECONDS = 120


def run_elsewhere(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in ``cwd``, with no store or path settings inherited."""
    env = {k: v for k, v in os.environ.items() if k not in ("CAIRN_STORE", "PYTHONPATH")}
    env.update({"OPENAI_API_KEY": "", "OPENAI_BASE_URL": "", "ANTHROPIC_API_KEY": ""})
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
        check=False,
    )


def test_the_revenue_pipeline_runs_as_a_directory_from_elsewhere(tmp_path: Path) -> None:
    """``python path/to/examples/revenue_pipeline --simulate`` from another
    directory starts its simulated services and posts its one report."""
    done = run_elsewhere(
        [
            str(EXAMPLES / "revenue_pipeline"),
            "--simulate",
            "--date",
            "2026-11-28",
            "--workdir",
            str(tmp_path / "run"),
        ],
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "chat posts: 1" in done.stdout
    assert "Daily revenue for 2026-11-27 (Asia/Tokyo)" in done.stdout


def test_the_agent_example_runs_offline_without_the_openai_sdk(tmp_path: Path) -> None:
    """``examples/agent_tools.py`` with no provider configured and the openai
    SDK made unimportable answers from the simulated model in process."""
    store = f"sqlite:///{tmp_path / 'agent.db'}"
    script = str(EXAMPLES / "agent_tools.py")
    # sys.modules[name] = None makes `import name` raise ImportError, as if it
    # were not installed.
    code = (
        "import runpy, sys; sys.modules['openai'] = None; "
        f"sys.argv = [{script!r}, '--docs', '3', '--store', {store!r}]; "
        f"runpy.run_path({script!r}, run_name='__main__')"
    )
    done = run_elsewhere(["-c", code], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Read 3 documents" in done.stdout


def test_the_review_example_runs_from_elsewhere(tmp_path: Path) -> None:
    """``python path/to/examples/review_apps.py`` from another directory
    reviews its apps in the workdir it is given."""
    done = run_elsewhere(
        [str(EXAMPLES / "review_apps.py"), "--apps", "2", "--workdir", str(tmp_path / "run")],
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "2/2 apps reviewed" in done.stdout
