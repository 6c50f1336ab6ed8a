"""The shape of cairn's source: functions short enough to read without scrolling."""

from __future__ import annotations

import ast
from pathlib import Path

import cairn

SOURCE = Path(cairn.__file__).parent
# A function longer than this is split into named parts.
MAX_FUNCTION_LINES = 60

Function = ast.FunctionDef | ast.AsyncFunctionDef


def long_functions(root: Path, limit: int) -> list[str]:
    """``path:line name (N lines)`` for every function under ``root`` longer than
    ``limit`` lines, nested functions and methods included. A function's length
    runs from its ``def`` line to its last line (decorators not counted)."""
    found: list[tuple[str, int, str]] = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, Function):
                continue
            assert node.end_lineno is not None  # always set by ast.parse
            lines = node.end_lineno - node.lineno + 1
            if lines > limit:
                where = path.relative_to(root.parent).as_posix()
                found.append((where, node.lineno, f"{node.name} ({lines} lines)"))
    # ast.walk goes breadth first; report in reading order.
    return [f"{where}:{line} {what}" for where, line, what in sorted(found)]


def test_the_scan_sees_long_and_nested_functions(tmp_path: Path) -> None:
    """The scan counts a method and a function nested in another, and leaves
    functions at the limit alone: otherwise the real check could pass by missing them."""
    package = tmp_path / "pkg"
    package.mkdir()
    body = "".join(f"        x{i} = {i}\n" for i in range(4))
    (package / "mod.py").write_text(
        "class A:\n"
        "    def method(self):\n" + body + "\n"
        "def outer():\n"
        "    def inner():\n" + body + "    return inner\n"
        "def short():\n    return 1\n",
        encoding="utf-8",
    )
    assert long_functions(package, limit=4) == [
        "pkg/mod.py:2 method (5 lines)",
        "pkg/mod.py:8 outer (7 lines)",
        "pkg/mod.py:9 inner (5 lines)",
    ]
    assert long_functions(package, limit=7) == []


def test_no_function_is_longer_than_sixty_lines() -> None:
    """Every function in cairn, methods and nested functions included, is at most
    60 lines: one you can read without scrolling (STYLE.md)."""
    offenders = long_functions(SOURCE, MAX_FUNCTION_LINES)
    assert not offenders, (
        f"functions over {MAX_FUNCTION_LINES} lines; split each into named parts:\n"
        + "\n".join(offenders)
    )
