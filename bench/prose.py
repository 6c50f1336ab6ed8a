"""Conversation text that does not repeat: consecutive chunks of real prose.

``bench.conversation.message_pair`` fills a fixed template with the turn's
number, so turn after turn differs by a few digits. A store that compresses a
row against earlier rows (CairnSaver's format 3 does) would store such a
conversation for almost nothing and flatter itself. These pairs are cut in
order from English prose found in this repository: the prose paragraphs of
``docs/**/*.md`` (``bench.token_estimate`` reads the same, without code blocks
or tables), then the docstrings of ``src/cairn``, each line once. A user
message is the next ~120 characters, the reply the next ~400, cut at a space;
no text is used twice, and a run asking for more turns than the prose holds
fails rather than start over. The text is the repository's at the time of
the run, so two runs of one commit see the same messages.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from bench.token_estimate import ROOT, _prose_of_markdown

SIZES = (120, 400)  # characters of the user message and of the reply


@cache
def corpus() -> str:
    """The prose, each distinct line once, joined by spaces."""
    texts = [_prose_of_markdown(p.read_text()) for p in sorted((ROOT / "docs").glob("**/*.md"))]
    texts += [
        doc for path in sorted((ROOT / "src" / "cairn").glob("**/*.py")) for doc in _docs(path)
    ]
    seen: set[str] = set()
    lines: list[str] = []
    for text in texts:
        for line in text.splitlines():
            line = " ".join(line.split())
            if line and line not in seen:
                seen.add(line)
                lines.append(line)
    return " ".join(lines)


def _docs(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return [
        doc
        for node in ast.walk(tree)
        if isinstance(node, kinds)
        if (doc := ast.get_docstring(node))
    ]


@cache
def pairs(turns: int) -> tuple[tuple[str, str], ...]:
    """``turns`` (user, reply) texts, consecutive and distinct."""
    text = corpus()
    found: list[tuple[str, str]] = []
    at = 0
    for _ in range(turns):
        pair = []
        for size in SIZES:
            end = text.rfind(" ", at, at + size + 1)
            if end <= at:
                end = at + size
            if end > len(text):
                raise ValueError(f"the prose holds fewer than {turns} turns of text")
            pair.append(text[at:end])
            at = end + 1
        found.append((pair[0], pair[1]))
    return tuple(found)


def message_pair(i: int) -> tuple[dict[str, str], dict[str, str]]:
    """Turn ``i``'s user message and reply, in the OpenAI chat shape."""
    user, reply = pairs((i // 1000 + 1) * 1000)[i]  # cut once per thousand turns
    return {"role": "user", "content": user}, {"role": "assistant", "content": reply}
