"""The built wheel carries every file the package needs at run time, and the
wheel and the sdist carry the license and the project's metadata.

The wheel and the sdist are built in-process with the project's own build
backend (hatchling, as ``pip wheel .`` or ``python -m build`` would), so a data
file that the build config or a ``.gitignore`` pattern leaves out (a migration,
a dashboard template, ``py.typed``, the LICENSE) fails here, not in a user's
fresh install.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import tomllib
import zipfile
from email.parser import HeaderParser
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


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> tarfile.TarFile:
    builders = pytest.importorskip("hatchling.builders.sdist")
    out = tmp_path_factory.mktemp("sdist")
    [built] = builders.SdistBuilder(str(ROOT)).build(directory=str(out), versions=["standard"])
    return tarfile.open(built)


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


def _metadata(wheel: zipfile.ZipFile) -> tuple[str, str]:
    """The wheel's .dist-info directory and its METADATA text."""
    [metadata] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    return metadata.removesuffix("METADATA"), wheel.read(metadata).decode()


def test_the_repository_holds_the_mit_license_pyproject_declares() -> None:
    """LICENSE is the MIT license of the cairn authors, as pyproject.toml says."""
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n")
    assert "Copyright (c) 2026 the cairn authors" in text
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert (project["license"], project["license-files"]) == ("MIT", ["LICENSE"])


def test_the_wheel_holds_the_license_and_names_it(wheel: zipfile.ZipFile) -> None:
    """The wheel carries LICENSE word for word under .dist-info/licenses/, and its
    metadata declares the MIT license expression and that file."""
    dist_info, text = _metadata(wheel)
    assert wheel.read(f"{dist_info}licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()
    headers = HeaderParser().parsestr(text)
    assert headers["License-Expression"] == "MIT"
    assert headers.get_all("License-File") == ["LICENSE"]


def test_the_wheel_names_the_repository_docs_and_issues(wheel: zipfile.ZipFile) -> None:
    """The metadata's project URLs (what an index page links to) are there, each
    one under the repository's address or its docs site."""
    urls = dict(
        line.split(", ", 1)
        for line in HeaderParser().parsestr(_metadata(wheel)[1]).get_all("Project-URL", [])
    )
    assert {"Repository", "Documentation", "Issues"} <= set(urls)
    assert urls["Issues"] == urls["Repository"] + "/issues"
    assert all(url.startswith("https://") for url in urls.values())


def test_the_sdist_holds_the_license(sdist: tarfile.TarFile) -> None:
    """The source distribution carries LICENSE word for word at its top, and
    PKG-INFO declares it."""
    names = sdist.getnames()
    [top] = {name.split("/", 1)[0] for name in names}
    member = sdist.extractfile(f"{top}/LICENSE")
    assert member is not None
    assert member.read() == (ROOT / "LICENSE").read_bytes()
    info = sdist.extractfile(f"{top}/PKG-INFO")
    assert info is not None
    assert HeaderParser().parsestr(info.read().decode())["License-Expression"] == "MIT"
