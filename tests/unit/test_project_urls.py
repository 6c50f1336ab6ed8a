"""The project names one repository and one docs site, everywhere: the package
metadata (pyproject.toml's [project.urls]), the docs site (mkdocs.yml) and the
READMEs' links."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _urls() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    urls: dict[str, str] = project["urls"]
    return urls


def _mkdocs(key: str) -> str:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    match = re.search(rf"^{key}:\s*(\S+)\s*$", config, re.MULTILINE)
    assert match is not None, f"mkdocs.yml sets no {key}"
    return match[1]


def test_metadata_names_the_repository_its_docs_and_issues() -> None:
    """[project.urls] gives the repository, the docs site and the issue tracker
    (the links an index page shows beside the description)."""
    urls = _urls()
    assert re.fullmatch(r"https://github\.com/[\w.-]+/cairn", urls["Repository"])
    assert urls["Issues"] == f"{urls['Repository']}/issues"
    assert urls["Homepage"] == urls["Repository"]
    assert urls["Documentation"].startswith("https://")


def test_the_docs_site_names_the_same_repository_and_address() -> None:
    """mkdocs.yml's repo_url and site_url are the metadata's Repository and
    Documentation, so the site's links and the package's agree."""
    urls = _urls()
    assert _mkdocs("repo_url") == urls["Repository"]
    assert _mkdocs("site_url") == urls["Documentation"]


def test_every_repository_link_in_the_docs_is_to_this_repository() -> None:
    """A github.com link in the READMEs or under docs/ that names a cairn
    repository names this one (no second, stale address)."""
    repository = _urls()["Repository"]
    pages = [ROOT / "README.md", ROOT / "README.ja.md", *(ROOT / "docs").rglob("*.md")]
    stale = set()
    for page in pages:
        for url in re.findall(r"https://github\.com/[\w.-]+/cairn\b[\w./#-]*", page.read_text()):
            if not url.startswith(repository):
                stale.add((page.relative_to(ROOT).as_posix(), url))
    assert not stale, f"links to another cairn repository: {sorted(stale)}"
