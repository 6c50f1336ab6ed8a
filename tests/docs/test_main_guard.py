"""A module a command may import runs nothing at import.

``cairn worker``, ``cairn check``, ``cairn enqueue`` and ``cairn schedules``
import MODULE:APP to find the app. A module that runs its batch at import would
run it then too (and, with ``--store``, make ``use_store`` fail). So the
README's Quickstart (the first module a newcomer saves), every docs block that
names its file (a module other blocks and sessions import), and every example
under examples/ guard their run with ``if __name__ == "__main__":``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.docs.blocks import ROOT, all_pages

# Calls that run tasks: app.run / run_batch and their async forms, app.result.
RUNS = frozenset({"run", "run_batch", "arun", "arun_batch", "result", "aresult"})
NOT_AN_APP = frozenset({"subprocess", "asyncio"})


def _modules() -> list[tuple[str, str]]:
    """(where, source) of each module the rule covers."""
    found: list[tuple[str, str]] = []
    for page in all_pages():
        python = [block for block in page.blocks if block.lang == "python"]
        for block in python:
            quickstart = page.path.name.startswith("README") and block is python[0]
            if block.file_name or quickstart:
                found.append((block.id, block.text))
    for path in sorted((ROOT / "examples").rglob("*.py")):
        found.append((path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8")))
    return found


def runs_at_import(source: str) -> list[int]:
    """The lines where the module, when imported, calls something that runs a task:
    a call of ``.run``, ``.run_batch``, ``.arun`` ... outside functions, classes
    and the ``if __name__ == "__main__":`` block."""
    lines: list[int] = []
    for statement in ast.parse(source).body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if _is_main_guard(statement):
            continue
        lines += [call.lineno for call in _calls_run_now(statement) if _runs_a_task(call)]
    return sorted(set(lines))


def _calls_run_now(node: ast.AST) -> list[ast.Call]:
    """The calls in ``node`` that run when it runs: not those inside a function
    or lambda it defines (they run when that is called)."""
    calls = [node] if isinstance(node, ast.Call) else []
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, ast.Lambda | ast.FunctionDef | ast.AsyncFunctionDef):
            calls += _calls_run_now(child)
    return calls


def _is_main_guard(statement: ast.stmt) -> bool:
    if not isinstance(statement, ast.If) or not isinstance(statement.test, ast.Compare):
        return False
    test = statement.test
    names = [test.left, *test.comparators]
    return any(isinstance(n, ast.Name) and n.id == "__name__" for n in names) and any(
        isinstance(n, ast.Constant) and n.value == "__main__" for n in names
    )


def _runs_a_task(node: ast.Call) -> bool:
    if not isinstance(node.func, ast.Attribute):
        return False
    owner = node.func.value
    return node.func.attr in RUNS and not (isinstance(owner, ast.Name) and owner.id in NOT_AN_APP)


MODULES = _modules()


@pytest.mark.parametrize(("where", "source"), MODULES, ids=[where for where, _ in MODULES])
def test_a_module_runs_nothing_at_import(where: str, source: str) -> None:
    """The module's runs sit under ``if __name__ == "__main__":`` (or in a function)."""
    lines = runs_at_import(source)
    assert not lines, (
        f"{where} runs tasks at import (its lines {lines}): move the run under "
        'if __name__ == "__main__":, so `cairn worker`/`cairn check` can import it'
    )


def test_the_rule_sees_a_run_at_import_and_not_a_guarded_one() -> None:
    """A batch run at the top level, or inside a with block, is found; the same
    under the guard, or inside a function, is not; subprocess.run is no task."""
    assert runs_at_import("app.run_batch('b', t, [])\n") == [1]
    assert runs_at_import("with s:\n    print(app.run(t))\n") == [2]
    assert runs_at_import("if __name__ == '__main__':\n    app.run(t)\n") == []
    assert runs_at_import("def main():\n    app.run(t)\n") == []
    assert runs_at_import("later = lambda: app.run(t)\n") == []
    assert runs_at_import("subprocess.run(['ls'])\n") == []


def test_the_quickstart_is_covered() -> None:
    """The rule reaches the README's Quickstart in both languages."""
    covered = {where.split(":")[0] for where, _ in MODULES}
    assert {"README.md", "README.ja.md"} <= covered
    assert any(Path(where).parts[0] == "examples" for where, _ in MODULES)
