"""The docs site's nav in mkdocs.yml lists every page under docs/, and only pages that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# A nav entry ends in a page path: "  - Retries: retries.md" or "  - tutorial/index.md".
NAV_PAGE = re.compile(r"^\s*-\s+(?:[^\n]*:\s+)?(?P<page>[\w./-]+\.md)\s*$", re.MULTILINE)


def nav_pages() -> list[str]:
    """The page paths in mkdocs.yml's nav, in order (the nav is the file's last section)."""
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    _, found, nav = config.partition("\nnav:\n")
    assert found, "mkdocs.yml has no top-level nav: section"
    return [match["page"] for match in NAV_PAGE.finditer(nav)]


def docs_pages() -> set[str]:
    """Every Markdown page under docs/, as a path relative to it."""
    return {path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")}


def test_every_docs_page_is_in_the_nav() -> None:
    """A page added under docs/ without a nav entry would be built but reachable from nowhere."""
    missing = sorted(docs_pages() - set(nav_pages()))
    assert not missing, f"add these pages to the nav in mkdocs.yml: {missing}"


def test_every_nav_entry_is_a_page_once() -> None:
    """A nav entry names a page that exists, and no page is listed twice."""
    pages = nav_pages()
    absent = sorted(set(pages) - docs_pages())
    assert not absent, f"mkdocs.yml's nav names pages that are not under docs/: {absent}"
    repeated = sorted({page for page in pages if pages.count(page) > 1})
    assert not repeated, f"mkdocs.yml's nav lists these pages more than once: {repeated}"
