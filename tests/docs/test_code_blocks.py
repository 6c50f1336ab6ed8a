"""Every code block of README.md, README.ja.md and docs/ runs, and prints what it shows.

One test per block, named ``file:line``. The blocks run in a small thread pool
(each in its own subprocess and temporary directory): the first test asks for
every selected block at once, and each test then waits for its own. The
convention a block follows is in tests/docs/blocks.py and docs/contributing.md.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from tests.docs.blocks import (
    ROOT,
    RUN_LANGUAGES,
    TEXT_LANGUAGES,
    Block,
    Page,
    all_pages,
    doc_paths,
    indented_blocks,
    story_of,
)
from tests.docs.runner import Outcome, run_block, run_story

PAGES = all_pages()
# A python block that names its file (``# job.py``) is a file for the page's
# sessions: it runs when a ```console or ```sh block runs it, and on its own only
# if the page shows what it prints (an ```output block).
CODE_BLOCKS = [
    (page, block)
    for page in PAGES
    for block in page.blocks
    if block.lang in RUN_LANGUAGES
    and not (block.lang == "python" and block.file_name and block.expected_output is None)
]
WORKERS = max(2, min(4, (os.cpu_count() or 1) * 2))


@pytest.fixture(scope="module")
def block_outcome(request: pytest.FixtureRequest) -> Iterator[Callable[[Block], Outcome]]:
    """Starts every selected block in the pool at once; gives each test its own result."""
    selected = [
        item.callspec.params["page_block"]
        for item in request.session.items
        if hasattr(item, "callspec") and "page_block" in item.callspec.params
    ]
    with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="doc-block") as pool:
        # A chain of chapters is one job, all its sessions in order in one shell and
        # directory (submitted first: it is the longest); any other block runs alone.
        stories: dict[str, Future[dict[str, Outcome]]] = {}
        singles: dict[str, Future[Outcome]] = {}
        for page, block in selected:
            if block.not_run is not None:
                continue
            chain = _story(page, block)
            if chain is None:
                continue
            key = chain[0].path.as_posix()
            if key not in stories:
                stories[key] = pool.submit(run_story, chain)
        for page, block in selected:
            if block.not_run is None and _story(page, block) is None:
                singles[block.id] = pool.submit(run_block, page, block)

        def outcome(block: Block) -> Outcome:
            if block.id in singles:
                return singles[block.id].result()
            for story in stories.values():
                if block.id in story.result():
                    return story.result()[block.id]
            raise AssertionError(f"{block.id} ran in no job")

        yield outcome
        for single in singles.values():
            single.cancel()
        for story in stories.values():
            story.cancel()


def _story(page: Page, block: Block) -> list[Page] | None:
    """The chain of chapters a session block runs in, or None if it runs alone."""
    if block.lang == "python":
        return None
    chain = story_of(page, PAGES)
    return chain if len(chain) > 1 else None


@pytest.mark.parametrize("page_block", CODE_BLOCKS, ids=[block.id for _, block in CODE_BLOCKS])
def test_block_runs(
    page_block: tuple[Page, Block], block_outcome: Callable[[Block], Outcome]
) -> None:
    """The block runs as a reader would run it, and prints what the page shows."""
    _, block = page_block
    if block.not_run is not None:
        pytest.skip(f"not-run: {block.not_run}")
    outcome = block_outcome(block)
    assert outcome.ok, f"{block.id} ({block.lang}):\n" + "\n\n".join(outcome.problems)


def test_every_fence_says_what_it_holds() -> None:
    """A fence without a known language would slip past the suite: each one names its kind."""
    unknown = [
        f"{block.id}: ```{block.lang}"
        for page in PAGES
        for block in page.blocks
        if block.lang not in RUN_LANGUAGES + TEXT_LANGUAGES
    ]
    assert not unknown, (
        "label these fences: python, console or sh for code the suite runs, "
        f"or one of {', '.join(TEXT_LANGUAGES)} for text: {unknown}"
    )


def test_no_code_block_is_indented_instead_of_fenced() -> None:
    """An indented code block has no fence to say what it holds, so the suite
    would never run it: every code block is fenced."""
    indented = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in doc_paths()
        for line in indented_blocks(path.read_text(encoding="utf-8"))
    ]
    assert not indented, f"fence these blocks (```sh, ```python, ```text ...): {indented}"


def test_an_indented_block_is_found_and_a_list_continuation_is_not() -> None:
    """The check above can fail: it finds an indented block after a paragraph,
    not one inside a fence or a list item's continuation."""
    text = "Run:\n\n    cairn demo\n\n- a list item\n\n    its continuation\n\n```sh\n    x\n```\n"
    assert indented_blocks(text) == [3]


def test_every_output_block_belongs_to_a_script() -> None:
    """An ```output block checks the python block right above it; a stray one checks nothing."""
    stray = []
    for page in PAGES:
        checked = {block.line for block in page.blocks if block.expected_output is not None}
        for previous, block in zip([None, *page.blocks], page.blocks, strict=False):
            if block.lang == "output" and (previous is None or previous.line not in checked):
                stray.append(block.id)
    assert not stray, f"```output blocks with no ```python block right above them: {stray}"


def test_every_named_file_is_used() -> None:
    """A named block without an ```output block runs only through a session or an import."""
    unused = []
    for page in PAGES:
        others = "\n".join(block.text for block in page.blocks if block.lang in RUN_LANGUAGES)
        for block in page.blocks:
            name = block.file_name if block.lang == "python" else None
            if name is None or block.expected_output is not None:  # none, or runs on its own
                continue
            module = name.removesuffix(".py").replace("/", ".")
            stem = module.rsplit(".", 1)[-1]
            if not any(
                f"{word}" in others.replace(block.text, "")
                for word in (name, f"{module}:", f"import {stem}", f"from {module} ")
            ):
                unused.append(block.id)
    assert not unused, f"named python blocks that no session or block of their page runs: {unused}"


def test_pages_are_found() -> None:
    """The collector finds the README and the docs pages, and code in them."""
    names = {page.path.name for page in PAGES}
    assert {"README.md", "concepts.md", "resume.md"} <= names
    assert len(CODE_BLOCKS) > 40


def test_the_tutorial_is_one_story_in_chapter_order() -> None:
    """Each chapter continues the one before it, so its sessions run after theirs."""
    tutorial = next(page for page in PAGES if page.path.match("docs/tutorial/agent.md"))
    chain = [page.path.name for page in story_of(tutorial, PAGES)]
    assert chain == [
        "first-batch.md",
        "kill-and-resume.md",
        "look-at-it.md",
        "side-effect-once.md",
        "agent.md",
    ]


def test_a_session_sees_the_status_of_the_command_before() -> None:
    """`$?` after a command is that command's status, as in a terminal, not the runner's."""
    session = "$ (exit 3)\n$ echo $?\n3\n$ echo $?\n0\n"
    page = Page(ROOT / "docs" / "example.md")
    block = Block(page.path, 1, "console", session)
    assert run_block(page, block).ok
    wrong = Block(page.path, 1, "console", session.replace("3\n$", "0\n$"))
    assert not run_block(page, wrong).ok
