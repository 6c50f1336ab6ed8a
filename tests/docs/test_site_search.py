"""The built docs site: its search finds the page a query names, and its API
reference shows formatted signatures.

The site is built once for the module, as CI builds it (``mkdocs build
--strict``), into a temporary directory. Search is ranked by mkdocs-material's
own search worker (the script a browser runs) in Node (tests/docs/search_rank.js),
over the site's search/search_index.json.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.blocks import ROOT

pytestmark = pytest.mark.slow

BUILD_TIMEOUT = 300


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The docs site, built with --strict from this checkout."""
    pytest.importorskip("mkdocs", reason="the docs extra is not installed")
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    return out


def ranked(site: Path, query: str) -> list[str]:
    """The site's search results for ``query``, best first (locations)."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: it runs the site's search worker")
    script = Path(__file__).with_name("search_rank.js")
    done = subprocess.run(
        [node, str(script), str(site), query], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    results: list[str] = json.loads(done.stdout)
    return results


def test_searching_a_command_finds_its_reference_above_the_dashboards_checks(
    site: Path,
) -> None:
    """Searching "cairn check" ranks the command's section of the CLI reference among the
    first three results, and above "What the dashboard checks" (which it used to
    rank first, for the rare word cairn/ui/guard.py in its title)."""
    results = ranked(site, "cairn check")
    dashboard = next(r for r in results if r.startswith("observability/#what-the-dashboard"))
    assert "cli/#cairn-check" in results[:3], results[:10]
    assert results.index("cli/#cairn-check") < results.index(dashboard)


@pytest.mark.parametrize("command", ["cairn retry", "cairn worker", "cairn ops resolve"])
def test_searching_other_commands_finds_their_reference(site: Path, command: str) -> None:
    """A command's name ranks its CLI reference section among the first two results."""
    section = "cli/#" + command.replace(" ", "-")
    assert section in ranked(site, command)[:2]


def test_api_signatures_are_formatted_one_parameter_a_line(site: Path) -> None:
    """The reference shows ``Cairn(...)``'s signature formatted (ruff, the docs
    extra): one parameter a line, not one long line."""
    page = (site / "reference" / "cairn" / "index.html").read_text(encoding="utf-8")
    signature = re.search(r'<div class="doc-signature highlight">(.*?)</div>', page, re.DOTALL)
    assert signature is not None
    text = re.sub(r"<[^>]+>", "", signature[1])
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines[0].endswith("Cairn(")
    assert any(line.startswith("    store:") for line in lines)
    assert max(len(line) for line in lines) <= 80
