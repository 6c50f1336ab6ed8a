"""Find the fenced code blocks of the README and docs/, and what each one shows.

The convention (docs/contributing.md says it for writers):

- A ```python block is a complete script. It runs as ``python FILE`` in a fresh
  temporary directory. FILE is the name its first line gives (``# job.py``), or
  ``example.py``. Every named block of the same page is written beside it first,
  so one block can import another (``# myproject/batch.py``).
- An ```output block right after a ```python block (only blank lines between)
  is what the script prints; the run's stdout must match it.
- A ```console block is a shell session: ``$ `` lines run in order in a fresh
  temporary directory holding the page's named blocks; the lines after a command,
  up to the next ``$ ``, are what it prints (stdout and stderr) and must match.
  A ```sh block (or ```bash, ```shell) is commands only: each line runs and must
  succeed, its output is not checked; with ``$ `` lines it reads as a session.
- ``<!-- continues: other.md -->`` (a path relative to the page) makes the page a
  chapter that goes on from another: the sessions (```console, ```sh) of the whole
  chain of such pages run in order in one bash process and one directory that
  holds the named blocks of every page of the chain, so files, stores and
  exported variables carry from chapter to chapter as they do for a reader.
- ``<!-- not-run: why -->`` on the line before a fence (blank lines allowed)
  marks a block that cannot run here (it needs the network, S3, a paid API); the
  suite reports it as skipped with that reason.
- Every other fence names what it holds (```text, ```sql, ```ini, ...) and is
  not code: a diagram, a table, a format.

Expected output is compared after `normalized`: runs of spaces become one, and
times, UUIDs and process owners become placeholders. In an expected line, ``...``
matches any text; a line that is only ``...`` matches any number of lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Languages that are code: every such block runs, or carries a not-run marker.
RUN_LANGUAGES = ("python", "console", "sh", "bash", "shell")  # bash, shell: read as sh
# Languages that hold no code. A fence with no language at all is refused, so a
# new block cannot slip past the suite unlabeled.
TEXT_LANGUAGES = ("output", "text", "sql", "ini", "crontab", "json", "yaml", "toml", "mermaid")

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)")
_NOT_RUN = re.compile(r"^<!--\s*not-run:\s*(?P<why>.+?)\s*-->\s*$")
_CONTINUES = re.compile(r"^<!--\s*continues:\s*(?P<page>\S+)\s*-->\s*$", re.MULTILINE)
_FILE_NAME = re.compile(r"^#\s*(?P<name>[\w./-]+\.py)\b")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its text, and its marks."""

    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    not_run: str | None = None
    expected_output: str | None = None  # the ```output block after a python block

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT).as_posix()}:{self.line}"

    @property
    def file_name(self) -> str | None:
        """The name a python block gives itself on its first line, if any."""
        first = self.text.split("\n", 1)[0]
        match = _FILE_NAME.match(first)
        return match["name"] if match else None


@dataclass
class Page:
    path: Path
    blocks: list[Block] = field(default_factory=list)
    continues: Path | None = None  # the page this one goes on from (a chapter)

    def named_files(self) -> dict[str, str]:
        """The page's python blocks that name a file: file name -> source."""
        return {
            block.file_name: block.text
            for block in self.blocks
            if block.lang == "python" and block.file_name
        }


def doc_paths(root: Path = ROOT) -> list[Path]:
    """README.md, README.ja.md and every page under docs/, found anew each run."""
    readmes = [root / name for name in ("README.md", "README.ja.md") if (root / name).exists()]
    return readmes + sorted((root / "docs").rglob("*.md"))


def parse_page(path: Path) -> Page:
    """Every fenced block of one Markdown file, with the marks around it."""
    source = path.read_text(encoding="utf-8")
    lines = source.split("\n")
    previous = _CONTINUES.search(source)
    page = Page(path, continues=(path.parent / previous["page"]).resolve() if previous else None)
    raw: list[tuple[int, str, str, str | None]] = []  # line, lang, text, not-run reason
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        if end == len(lines):
            raise ValueError(f"{path}:{index + 1}: a code fence that is never closed")
        body = "\n".join(
            line[indent:] if line[:indent].isspace() else line for line in lines[index + 1 : end]
        )
        raw.append((index + 1, opening["lang"].lower(), body, _not_run_reason(lines, index)))
        index = end + 1
    for position, (line, lang, text, why) in enumerate(raw):
        expected = None
        if lang == "python" and position + 1 < len(raw):
            next_line, next_lang, next_text, _ = raw[position + 1]
            between = lines[_end_of_block(lines, line) : next_line - 1]
            if next_lang == "output" and all(not gap.strip() for gap in between):
                expected = next_text
        page.blocks.append(Block(path, line, lang, text, why, expected))
    return page


def _end_of_block(lines: list[str], opening_line: int) -> int:
    """The 1-based line just after the closing fence of the block opened at opening_line."""
    fence = _FENCE.match(lines[opening_line - 1])
    assert fence is not None
    end = opening_line
    while not lines[end].strip().startswith(fence["fence"]):
        end += 1
    return end + 1


def _not_run_reason(lines: list[str], fence_index: int) -> str | None:
    above = fence_index - 1
    while above >= 0 and not lines[above].strip():
        above -= 1
    if above < 0:
        return None
    match = _NOT_RUN.match(lines[above].strip())
    return match["why"] if match else None


def all_pages(root: Path = ROOT) -> list[Page]:
    return [parse_page(path) for path in doc_paths(root)]


def story_of(page: Page, pages: list[Page]) -> list[Page]:
    """The chain of chapters ``page`` belongs to, first to last ([page] if none)."""
    by_path = {other.path.resolve(): other for other in pages}
    first = page
    while first.continues is not None:
        if first.continues not in by_path:
            raise ValueError(f"{first.path}: continues a page that is not there: {first.continues}")
        first = by_path[first.continues]
    chain = [first]
    while True:
        following = [other for other in pages if other.continues == chain[-1].path.resolve()]
        if len(following) > 1:
            raise ValueError(f"{chain[-1].path}: more than one page continues it: {following}")
        if not following:
            return chain
        chain.append(following[0])


# -- comparing output ---------------------------------------------------------------

_TIME = re.compile(
    r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:?\d\d| [+-]\d{4}| UTC)?"
)
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
# A process owner: host/pid/start/nonce, as in TaskBusy and `cairn tasks`.
_OWNER = re.compile(r"\b[\w.-]+/\d+/\d+/[0-9a-f]{8}\b")
_WILDCARD = re.compile(r"\.\.\.|…")


_LIST_ITEM = re.compile(r"\s*([-*+]|\d+\.)\s")


def indented_blocks(text: str) -> list[int]:
    """The 1-based lines where an indented (4-space) code block starts, outside
    fences and lists: Markdown renders one as code, but no fence names it, so
    this collector would never run it."""
    starts: list[int] = []
    in_fence = in_list = False
    blank_before = True
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        elif (
            not in_fence and blank_before and not in_list and line.startswith("    ")
        ) and line.strip():
            starts.append(number)
        if not line.strip():
            blank_before = True
            continue
        if not (line.startswith("    ") and blank_before and not in_list):
            in_list = bool(_LIST_ITEM.match(line)) or (in_list and line.startswith("  "))
        blank_before = False
    return starts


def normalized(line: str) -> str:
    """A line with what differs run to run replaced, and spacing made uniform."""
    line = _UUID.sub("<uuid>", line)
    line = _TIME.sub("<time>", line)
    line = _OWNER.sub("<owner>", line)
    return " ".join(line.split())


def output_matches(expected: str, actual: str) -> bool:
    """Whether actual output matches what a block shows (see the module docstring)."""
    want = [normalized(line) for line in expected.strip("\n").split("\n")]
    got = [normalized(line) for line in actual.strip("\n").split("\n")]
    pattern = "".join(
        "(?:.*\n)*?" if line == "..." else ".*".join(map(re.escape, _WILDCARD.split(line))) + "\n"
        for line in want
    )
    return re.fullmatch(pattern, "\n".join(got) + "\n") is not None


# -- shell sessions ------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    line: str  # what runs
    expected: str | None  # what it prints; None for a ```sh block, which shows none


def session_commands(block: Block) -> list[Command]:
    """The commands of a ```console or ```sh block, each with the output it shows."""
    lines = block.text.split("\n")
    if not any(line.startswith("$ ") for line in lines):
        return [Command(line, None) for line in _joined(lines) if line.strip()]
    commands: list[Command] = []
    for line in lines:
        if line.startswith("$ "):
            commands.append(Command(line[2:].strip(), ""))
        elif commands:
            previous = commands[-1]
            shown = f"{previous.expected}\n{line}" if previous.expected else line
            commands[-1] = Command(previous.line, shown)
    return commands


def _joined(lines: list[str]) -> list[str]:
    """Lines with a trailing backslash joined to the next, as a shell reads them."""
    joined: list[str] = []
    pending = ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
        else:
            joined.append(pending + line)
            pending = ""
    return joined
