"""No traps for a newcomer: the store a run or command creates is named
on stderr (with a warning for the relative default store), ``cairn --version``,
``cairn migrate`` says what it did, ``cairn import`` creates the store it needs,
and a running task whose owner is gone says so.
"""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from cairn import Cairn, Context, Permanent, __version__
from cairn.cli import app as cli_app
from cairn.clock import FakeClock
from cairn.engine.owners import Owner, current_owner
from cairn.store import open_store
from cairn.store.migrate import latest_version
from tests.fixtures.schema_1.make import build_sqlite

_NOW = datetime.fromisoformat("2026-05-24T01:00:00+00:00")


@pytest.fixture(autouse=True)
def _no_outer_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """No store named by the outer environment, and plain Rich output."""
    for name in ("CAIRN_STORE", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)


def cli(*args: str) -> Result:
    """Run ``cairn ARGS`` in-process."""
    return CliRunner().invoke(cli_app, list(args))


def _run_one(app: Cairn) -> int:
    @app.task
    def double(ctx: Context, n: int) -> int:
        return 2 * n

    result: int = app.run(double, n=2)
    return result


# -- the store a run creates -------------------------------------------------------------


def test_the_default_store_is_named_and_warned_about_when_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``Cairn()`` creating ``./.cairn/cairn.db`` names the absolute path and warns that
    the default is relative to the current directory; opening it again says nothing."""
    monkeypatch.chdir(tmp_path)
    with Cairn(clock=FakeClock()) as app:
        assert _run_one(app) == 4
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == f"cairn: created a new store at {tmp_path / '.cairn' / 'cairn.db'}"
    assert lines[1].startswith("cairn: warning: the default store (sqlite:///.cairn/cairn.db)")
    assert "relative to the current directory" in lines[1]
    assert "Set CAIRN_STORE" in lines[1]
    assert len(lines) == 2
    with Cairn(clock=FakeClock()) as again:
        assert _run_one(again) == 4
    assert capsys.readouterr().err == ""


def test_a_named_store_is_named_when_created_without_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store the user named is announced once when it is created, with no warning."""
    path = tmp_path / "named.db"
    with Cairn(f"sqlite:///{path}", clock=FakeClock()) as app:
        _run_one(app)
    assert capsys.readouterr().err == f"cairn: created a new store at {path}\n"


def test_a_new_postgres_schema_is_named_when_created(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A PostgreSQL schema created on first use is named with its server, database
    and schema; the already migrated test database is not announced."""
    with Cairn(f"{pg_url}?schema=fresh", clock=FakeClock()) as app:
        _run_one(app)
    err = capsys.readouterr().err
    assert err.startswith("cairn: created a new store at postgresql://")
    assert err.rstrip().endswith("#schema=fresh")
    with Cairn(pg_url, clock=FakeClock()) as app:
        _run_one(app)
    assert capsys.readouterr().err == ""


# -- the CLI --------------------------------------------------------------------------------


def test_cairn_version_prints_the_version() -> None:
    """``cairn --version`` prints the package's version and exits 0."""
    result = cli("--version")
    assert result.exit_code == 0
    assert result.stdout == f"cairn {__version__}\n"


def test_migrate_says_it_created_upgraded_or_found_current(tmp_path: Path) -> None:
    """``cairn migrate`` says which it did: created the schema, upgraded it from the
    version it found, or found it current."""
    latest = latest_version("sqlite")
    new = f"sqlite:///{tmp_path / 'new.db'}"
    created = cli("migrate", "--store", new)
    assert created.exit_code == 0, created.output
    assert created.stdout == f"{new}: created the schema at version {latest}\n"
    assert created.stderr == f"cairn: created a new store at {tmp_path / 'new.db'}\n"
    current = cli("migrate", "--store", new)
    assert current.stdout == f"{new}: the schema is already current (version {latest})\n"
    assert current.stderr == ""
    old = tmp_path / "old.db"
    build_sqlite(old)
    upgraded = cli("migrate", "--store", str(old))
    assert upgraded.stdout == f"{old}: upgraded the schema from version 1 to {latest}\n"


def test_migrate_creates_a_new_postgres_schema_and_says_so(pg_url: str) -> None:
    """On PostgreSQL, a new ``?schema=`` is created and reported at the latest version."""
    url = f"{pg_url}?schema=made_by_migrate"
    result = cli("migrate", "--store", url)
    assert result.exit_code == 0, result.output
    assert f"created the schema at version {latest_version('postgres')}" in result.stdout


def _exported(tmp_path: Path) -> Path:
    """An export file of a one-task batch ``nightly``."""
    source = f"sqlite:///{tmp_path / 'source.db'}"
    with Cairn(source, clock=FakeClock()) as app:

        @app.task
        def double(ctx: Context, n: int) -> int:
            return 2 * n

        app.enqueue("nightly", double, [{"n": 1}])
    export = tmp_path / "nightly.cairn"
    result = cli("export", "--batch", "nightly", str(export), "--store", source)
    assert result.exit_code == 0, result.output
    return export


def test_import_creates_a_new_postgres_schema(tmp_path: Path, pg_url: str) -> None:
    """``cairn import`` into a schema that does not exist yet creates it, names it on
    stderr, and imports the batch (as docs/backup.md shows)."""
    export = _exported(tmp_path)
    url = f"{pg_url}?schema=imported"
    result = cli("import", str(export), "--store", url, "--blobs", str(tmp_path / "blobs"))
    assert result.exit_code == 0, result.output
    assert "cairn: created a new store at postgresql://" in result.stderr
    assert "imported batch 'nightly': 1 task(s)" in result.stderr
    store = open_store(url, create=False)
    try:
        task = store.get_task("nightly/n=1")
        assert task is not None
        assert task.status == "pending"
    finally:
        store.close()


def test_import_creates_a_new_sqlite_file(tmp_path: Path) -> None:
    """``cairn import`` into a SQLite path with nothing there creates the store."""
    export = _exported(tmp_path)
    target = tmp_path / "target.db"
    result = cli("import", str(export), "--store", str(target))
    assert result.exit_code == 0, result.output
    assert f"cairn: created a new store at {target}" in result.stderr
    assert target.is_file()


# -- a running task whose owner is gone ----------------------------------------------------


@pytest.fixture
def running_tasks(tmp_path: Path) -> tuple[str, str, str]:
    """A store with two running tasks: one owned by a process that has exited (on
    this host), one by a live owner; the store URL and both ids."""
    url = f"sqlite:///{tmp_path / 'cairn.db'}"
    with Cairn(url, clock=FakeClock()) as app:

        @app.task
        def double(ctx: Context, n: int) -> int:
            return 2 * n

        app.enqueue("b", double, [{"n": 1}, {"n": 2}])
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    gone = str(Owner(current_owner().host, child.pid, "?", "feedbeef"))
    store = open_store(url)
    try:
        lease = _NOW + timedelta(minutes=5)
        dead = store.claim_next_pending("b", gone, lease, _NOW)
        live = store.claim_next_pending("b", str(current_owner()), lease, _NOW)
        assert dead is not None
        assert live is not None
    finally:
        store.close()
    return url, dead.id, live.id


def test_tasks_and_show_mark_a_running_task_whose_owner_is_gone(
    running_tasks: tuple[str, str, str],
) -> None:
    """``cairn tasks`` and ``cairn show`` say ``running (owner gone)`` for a task whose
    owning process has exited, and plain ``running`` for one whose owner lives."""
    url, dead, live = running_tasks
    listing = cli("tasks", "--store", url)
    assert listing.exit_code == 0, listing.output
    status = {line.split()[0]: line.split()[1:4] for line in listing.stdout.splitlines()[1:]}
    assert status[dead][:3] == ["running", "(owner", "gone)"]
    assert status[live][0] == "running"
    assert status[live][1] != "(owner"
    shown = cli("show", dead, "--store", url)
    assert "running (owner gone)" in shown.stdout
    assert "running (owner gone)" not in cli("show", live, "--store", url).stdout


# -- long values in tables -----------------------------------------------------------------

_LONG_ERROR = "the reporting API refused the request because the quota of the day is spent"


def test_long_values_are_cut_with_an_ellipsis_on_a_terminal_and_whole_with_wide(
    tmp_path: Path,
) -> None:
    """On a 100-column terminal, ``cairn tasks`` fits every row in 100 columns,
    cutting the error with "…" and never the id or a time; ``--wide`` shows the
    cell whole (wrapped), as plain output has it."""
    url = f"sqlite:///{tmp_path / 'cairn.db'}"
    with Cairn(url, clock=FakeClock()) as app:

        @app.task
        def fetch(ctx: Context, n: int) -> int:
            raise Permanent(_LONG_ERROR)

        app.run_batch("b", fetch, [{"n": 1}], progress=False)
    terminal = {"TTY_COMPATIBLE": "1", "COLUMNS": "100", "NO_COLOR": "1"}
    cut = CliRunner().invoke(cli_app, ["tasks", "--store", url], env=terminal)
    lines = [_unstyled(line) for line in cut.stdout.splitlines()]
    assert max(len(line) for line in lines) <= 100
    row = next(line for line in lines if line.startswith("b/n=1"))
    assert row.rstrip().endswith("…")
    assert "Z  " in row  # both times whole
    assert _LONG_ERROR not in cut.stdout
    wide = CliRunner().invoke(cli_app, ["tasks", "--store", url, "--wide"], env=terminal)
    assert "…" not in wide.stdout
    plain = cli("tasks", "--store", url)
    # The cell whole, as plain output (which no terminal cuts) has it.
    whole = plain.stdout.splitlines()[1].split("0.00s", 1)[1].split()
    assert " ".join(whole) in " ".join(_unstyled(wide.stdout).split())
    assert "because" in whole


def _unstyled(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)
