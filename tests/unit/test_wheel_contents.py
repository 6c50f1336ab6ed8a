"""The built wheel carries every file the package needs at run time.

The wheel is built in-process with the project's own build backend (hatchling,
as ``pip wheel .`` or ``python -m build`` would), so a data file that the build
config or a ``.gitignore`` pattern leaves out (a migration, a dashboard
template, ``py.typed``) fails here, not in a user's fresh install.
"""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# What breaks at once without it: the stores, the dashboard, type checking.
REQUIRED = (
    "cairn/py.typed",
    "cairn/store/migrations/sqlite/0001_initial.sql",
    "cairn/store/migrations/postgres/0001_initial.sql",
    "cairn/ui/templates/layout.html",
    "cairn/ui/static/htmx.min.js",
    "cairn/ui/static/dashboard.css",
)


def _tracked_package_files() -> list[str]:
    """Every file git tracks under src/cairn, as a path inside the wheel."""
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    listed = subprocess.run(
        [git, "ls-files", "src/cairn"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout: {listed.stderr.strip()}")
    return [line.removeprefix("src/") for line in listed.stdout.splitlines()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    builders = pytest.importorskip("hatchling.builders.wheel")
    out = tmp_path_factory.mktemp("wheel")
    [built] = builders.WheelBuilder(str(ROOT)).build(directory=str(out), versions=["standard"])
    return zipfile.ZipFile(built)


def test_the_wheel_holds_every_tracked_file_of_the_package(wheel: zipfile.ZipFile) -> None:
    """Every file git tracks under src/cairn (code, SQL migrations, templates,
    static files, py.typed) is in the wheel at the same path."""
    names = set(wheel.namelist())
    tracked = _tracked_package_files()
    for required in REQUIRED:
        assert required in tracked  # the list above names real files
    assert sorted(set(tracked) - names) == []


def test_the_wheel_declares_the_command_and_the_pytest_plugin(wheel: zipfile.ZipFile) -> None:
    """The wheel's entry points give the ``cairn`` command and the pytest plugin,
    under the distribution name cairn-durable."""
    [entry_points] = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    assert entry_points.startswith("cairn_durable-")
    text = wheel.read(entry_points).decode()
    assert "cairn = cairn.cli:main" in text
    assert "cairn = cairn.testing.plugin" in text
