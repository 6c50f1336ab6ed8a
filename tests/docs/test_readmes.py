"""README.md and README.ja.md work where they are read, and say the same.

An index page (PyPI renders README.md as the project's description) shows the
README without the repository around it, so a relative link there leads
nowhere: every link is absolute, and one into the repository names a file or
directory that exists. README.ja.md is kept in step with README.md: the same
links, in the same order, and the same command lines in "The command line".
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from tests.docs.blocks import ROOT, parse_page

READMES = ("README.md", "README.ja.md")
REPOSITORY = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
    "urls"
]["Repository"]

_FENCED = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+\1", re.DOTALL)
_INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$", re.MULTILINE)
_AUTOLINK = re.compile(r"<([a-z][a-z0-9+.-]*:[^\s>]+)>", re.IGNORECASE)
_HTML = re.compile(r"\b(?:href|src)\s*=\s*[\"']([^\"']+)[\"']", re.IGNORECASE)
_OWN_FILE = re.compile(re.escape(REPOSITORY) + r"/(?:blob|tree)/main/(?P<path>[^#?]+)")


def links(readme: str) -> list[str]:
    """Every link target of a README, in order: inline links and images,
    reference definitions, autolinks and HTML attributes; none inside code."""
    text = (ROOT / readme).read_text(encoding="utf-8")
    text = _CODE_SPAN.sub("", _FENCED.sub("", text))
    found: list[tuple[int, str]] = []
    for pattern in (_INLINE, _REFERENCE, _AUTOLINK, _HTML):
        found += [(match.start(), match[1]) for match in pattern.finditer(text)]
    return [target for _, target in sorted(found)]


@pytest.mark.parametrize("readme", READMES)
def test_no_readme_link_is_relative(readme: str) -> None:
    """Every link of the README is an absolute http(s) URL or an anchor on the
    page itself, so it works on an index page too."""
    found = links(readme)
    assert len(found) > 20  # the parser sees the links that are there
    relative = [t for t in found if not re.match(r"https?://|#", t)]
    assert not relative, f"{readme}: relative links break on an index page: {relative}"


def test_a_relative_link_is_found_in_every_form(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The link finder sees inline links, images, reference definitions and HTML
    links, and skips what sits in code (so the test above cannot pass by missing one)."""
    page = tmp_path / "README.md"
    page.write_text(
        "[a](docs/a.md) ![b](img/b.png) <a href='c.html'>c</a>\n"
        "[d]: docs/d.md\n`[e](not-a-link)`\n```text\n[f](nor-this)\n```\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    assert links("README.md") == ["docs/a.md", "img/b.png", "c.html", "docs/d.md"]


@pytest.mark.parametrize("readme", READMES)
def test_links_into_the_repository_name_files_that_exist(readme: str) -> None:
    """A link to a file or directory of this repository (on its main branch)
    names one that is there: a renamed page breaks this test, not the link."""
    own = [match["path"] for t in links(readme) if (match := _OWN_FILE.match(t))]
    assert own  # the README does link into the repository
    missing = [path for path in own if not (ROOT / path).exists()]
    assert not missing, f"{readme} links to files the repository does not hold: {missing}"


def test_the_japanese_readme_has_the_same_links() -> None:
    """README.ja.md links to the same places as README.md, in the same order
    (the language switch at the top points each at the other)."""
    english, japanese = links("README.md"), links("README.ja.md")
    switch = f"{REPOSITORY}/blob/main/README"
    assert english[0] == f"{switch}.ja.md"
    assert japanese[0] == f"{switch}.md"
    assert english[1:] == japanese[1:], _difference(english[1:], japanese[1:])


def command_lines(readme: str) -> list[str]:
    """The command column of "The command line" block: each line's text before
    its description (lines that hold only a description give nothing)."""
    path = ROOT / readme
    text = path.read_text(encoding="utf-8")
    heading = re.search(r"^## .*(command line|コマンドライン).*$", text, re.MULTILINE)
    assert heading is not None, f"{readme} has no command-line section"
    heading_line = text[: heading.start()].count("\n") + 1
    block = next(b for b in parse_page(path).blocks if b.line > heading_line)
    lines = [line.rstrip() for line in block.text.split("\n") if line.strip()]
    # The descriptions start in one column: where the description-only lines start.
    column = min(len(line) - len(line.lstrip()) for line in lines if line.startswith(" " * 20))
    usages = []
    for line in lines:
        if line[:column].strip() == "":
            continue  # only a description
        split = len(line) > column and line[column - 1] == " " and line[column] != " "
        usages.append(line[:column].rstrip() if split else line)
    return usages


def test_the_japanese_readme_lists_the_same_command_lines() -> None:
    """The `cairn ...` lines of README.ja.md's command list are README.md's, word
    for word and in order: the commands, their arguments and their options."""
    english, japanese = command_lines("README.md"), command_lines("README.ja.md")
    assert len(english) > 20
    assert english == japanese, _difference(english, japanese)


def _difference(english: list[str], japanese: list[str]) -> str:
    only_en = [item for item in english if item not in japanese]
    only_ja = [item for item in japanese if item not in english]
    return f"only in README.md: {only_en}; only in README.ja.md: {only_ja}"
