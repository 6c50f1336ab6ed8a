"""Step-name templates: numbered steps, map items, ids and dates collapse; names
written once stay as they are."""

from __future__ import annotations

import pytest

from cairn.observe.templates import step_template


@pytest.mark.parametrize(
    ("name", "template"),
    [
        ("extract", "extract"),
        ("fetch-17", "fetch-*"),
        ("fetch_3", "fetch_*"),
        ("page-3-of-9", "page-*-of-*"),
        ("score[alice]", "score[*]"),
        ("score[17]", "score[*]"),
        ("report 2026-05-24", "report *"),
        ("at 06:00", "at *"),
        ("user/0f8fad5b-d9cb-469f-a165-70867728950e/load", "user/*/load"),
        ("blob 9f86d081884c7d65", "blob *"),
        ("s3", "s3"),
        ("v2", "v2"),
        ("llm-call", "llm-call"),
        ("cafe", "cafe"),
        ("x" * 10 + "~" + "a" * 32, "x" * 10 + "~*"),
    ],
)
def test_step_template(name: str, template: str) -> None:
    """Each name maps to its template; the result is its own template."""
    assert step_template(name) == template
    assert step_template(template) == template
