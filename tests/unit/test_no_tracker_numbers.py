"""Code says why in its own words, not by pointing at a tracker's number.

A tracker number in parentheses means nothing to a reader without that tracker, and goes stale
when the tracker moves: a comment or docstring says the reason itself.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Written in two parts so that this file does not match itself.
TRACKER_NUMBER = re.compile(r"\b[Ii]ssue" + r"s? #?\d+")


def test_no_source_test_or_bench_file_names_a_tracker_number() -> None:
    """No .py file under src/, tests/, bench/ or examples/, nor bench/README.md,
    refers to "issue N"."""
    files = [
        path
        for folder in ("src", "tests", "bench", "examples")
        for path in (ROOT / folder).rglob("*.py")
    ]
    files.append(ROOT / "bench" / "README.md")
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if TRACKER_NUMBER.search(line)
    ]
    assert not found, "say the reason instead of a tracker number:\n" + "\n".join(found)
