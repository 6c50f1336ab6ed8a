"""`cairn check MODULE:APP --store URL` on a module that runs its batch at import.

The CLI imports the module to find its app; a module that runs a batch at its
top level has opened its own store by then, and ``--store`` cannot take effect.
The error must name the cause (that module, while it was imported, at which
line) and the fix (``if __name__ == "__main__":``). With the guard, the same
command imports the module without running anything.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.acceptance

CLI = str(Path(sys.executable).with_name("cairn"))
TIMEOUT = 60

MODULE = """\
from pathlib import Path

from cairn import Cairn, Context

app = Cairn("sqlite:///nightly.db")


def greet(name: str) -> str:
    with Path("greetings.log").open("a") as log:
        log.write(name + "\\n")
    return f"hello, {name}"


@app.task
def hello(ctx: Context, name: str) -> str:
    return ctx.step("greet", greet, name)


"""
RUN = 'app.run_batch("nightly", hello, [{"name": "a"}, {"name": "b"}], progress=False)\n'


def _check(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    command = [CLI, "check", "nightly:app", "--store", "sqlite:///elsewhere.db"]
    return subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )


def test_the_error_names_the_module_that_opened_the_store_at_import_and_the_fix(
    tmp_path: Path,
) -> None:
    """The module's top-level run opens its named store during the import; the
    CLI then refuses --store in one line (exit 2) that names the module, the
    line of the run and the `if __name__ == "__main__":` fix, and writes
    nothing to the store --store named."""
    (tmp_path / "nightly.py").write_text(MODULE + RUN, encoding="utf-8")
    run_line = (MODULE + RUN).count("\n")

    checked = _check(tmp_path)

    assert checked.returncode == 2, checked.stdout + checked.stderr
    [error] = [line for line in checked.stderr.splitlines() if line.startswith("error:")]
    assert "the app's store is already open" in error
    assert "module 'nightly' opened it while it was being imported" in error
    assert f"(nightly.py:{run_line}, at the module's top level)" in error
    assert 'if __name__ == "__main__":' in error
    assert "Traceback" not in checked.stderr
    # The import really ran the batch (that is the cause the error names) ...
    # (in either order: the batch runs its two tasks at once)
    assert sorted((tmp_path / "greetings.log").read_text().split()) == ["a", "b"]
    # ... and nothing reached the store --store named.
    assert not (tmp_path / "elsewhere.db").exists()


def test_with_the_guard_importing_the_module_runs_nothing(tmp_path: Path) -> None:
    """The same module with its run under `if __name__ == "__main__":`: `cairn
    check --store` imports it, uses the store it names and runs no step."""
    guarded = MODULE + 'if __name__ == "__main__":\n    ' + RUN
    (tmp_path / "nightly.py").write_text(guarded, encoding="utf-8")

    checked = _check(tmp_path)

    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "no unfinished tasks of this app" in checked.stderr
    assert not (tmp_path / "greetings.log").exists()
    assert not (tmp_path / "nightly.db").exists()
