"""A SQLite store that cannot be written is opened read-only: every reading API
and every reading command works on it, nothing migrates it, and every write is
refused with ``StoreReadOnly`` saying so, leaving the file byte-for-byte as it was.

The stores are made read-only for real, in the three ways a person meets: the
file itself (the immutable flag), its directory (the flag on the directory, so
SQLite cannot create its ``-wal`` and ``-shm`` files), and a read-only mount (a
bind mount). The tests run as root, whom permission bits do not stop, so those
are the mechanisms that do (``tests/filesystems.py``).
"""

from __future__ import annotations

import io
import json
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, closing, contextmanager
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from cairn import Cairn, Context, Permanent, StoreReadOnly, StoreUnavailable
from cairn.agent import load_conversation
from cairn.agent.archive import iter_history
from cairn.cli import app as cli_app
from cairn.clock import FakeClock
from cairn.portable import export_batch
from cairn.store import admin
from cairn.store.migrate import latest_version
from cairn.store.reports import TaskQuery, Window
from cairn.store.sqlite import SQLiteStore
from tests.agent_server import DocReader, model_server, openai_client, reader_task
from tests.filesystems import immutable, read_only_mount

FAILED = "reviews/app_id=bad"
DONE = "reviews/app_id=a1"
PENDING = "later/app_id=p1"
AGENT = "agents/goal=Read every document."


def _build(path: Path) -> None:
    """Reviews with a step and an operation key each (one key fails, and its task),
    two pending tasks, and an agent with a conversation and recorded model calls."""
    clock = FakeClock()
    with Cairn(f"sqlite:///{path}", clock=clock) as app:

        def judge(app_id: str) -> str:
            return f"{app_id} is fine"

        def post(key: str, app_id: str) -> str:
            if app_id == "bad":
                raise Permanent("the channel refused app bad")
            return f"posted {key}"

        @app.task
        def review(ctx: Context, app_id: str) -> str:
            verdict = ctx.step("judge", judge, app_id)
            return str(ctx.once(f"post/{app_id}", post, app_id)) + verdict

        items = [{"app_id": "a1"}, {"app_id": "a2"}, {"app_id": "bad"}]
        report = app.run_batch("reviews", review, items, concurrency=1, progress=False)
        assert (report.completed, report.failed) == (2, 1)
        app.enqueue("later", review, [{"app_id": "p1"}, {"app_id": "p2"}])
        with model_server(DocReader(3)) as server:
            agent = reader_task(app, openai_client(server), threshold=300, keep_tail=100)
            goals = [{"goal": "Read every document."}]
            assert app.run_batch("agents", agent, goals, progress=False).completed == 1


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The store, built once and frozen into one WAL-mode file (no -wal beside it)."""
    built = tmp_path_factory.mktemp("build") / "cairn.db"
    _build(built)
    frozen = tmp_path_factory.mktemp("template") / "cairn.db"
    with closing(sqlite3.connect(built)) as src, closing(sqlite3.connect(frozen)) as dst:
        src.backup(dst)
        dst.execute("PRAGMA journal_mode = WAL")
    return frozen


def _without_stamp(line: str) -> dict[str, Any]:
    row: dict[str, Any] = json.loads(line)
    row.pop("exported_at", None)  # the wall-clock time of the export
    row.pop("source", None)  # the store's URL
    return row


def _rows(store: SQLiteStore, batch: str) -> list[tuple[str, dict[str, Any]]]:
    """Every row ``export_rows`` hands over for ``batch``, in order."""
    rows: list[tuple[str, dict[str, Any]]] = []
    store.export_rows(batch, lambda table, row: rows.append((table, row)))
    return rows


def _everything(store: SQLiteStore) -> dict[str, Any]:
    """What every reading API of the store returns, for comparison."""
    window = Window()
    export = io.StringIO()
    export_batch(store, None, "reviews", export)
    view = load_conversation(store, AGENT)
    assert view is not None
    return {
        "batches": store.batch_summaries(),
        "counts": dict(store.batch_counts("reviews")),
        "batch task": store.batch_task_name("reviews"),
        "tasks": list(store.list_tasks()),
        "failed": list(store.list_tasks(status="failed", batch="reviews", limit=5)),
        "task": store.get_task(FAILED),
        "running": store.running_tasks(None),
        "histories": {t.id: store.load_history(t.id) for t in store.list_tasks()},
        "operations": list(store.list_operations()),
        "operation": store.get_operation("", "post/a1"),
        "op calls": store.operation_call_counts(),
        "conversations": store.conversation_summaries(AGENT),
        "active": store.load_active_messages(AGENT, "main"),
        "messages": store.load_messages(AGENT, "main", 0, 1000),
        "history": list(iter_history(store, AGENT, "main")),
        "view": (view.rows, view.summary, view.messages),
        "calls": list(store.recorded_calls()),
        "schedules": store.list_schedules(),
        "signal": store.get_signal(PENDING, "approval"),
        "task totals": store.task_totals(window),
        "task errors": list(store.failed_task_errors(window)),
        "spans": store.batch_spans(window),
        "step totals": store.step_totals(window),
        "durations": list(store.step_durations(window)),
        "step errors": list(store.step_errors(window)),
        "op totals": store.op_totals(window),
        "running now": store.running_checkpoints(),
        "page": store.find_tasks(TaskQuery(include_internal=True), size=3),
        "open alerts": store.open_alerts("cairn.observe.alert", "stall/", "recovered/"),
        "rows": _rows(store, "reviews"),
        "batch names": store.batch_names(),
        "statuses": store.batch_statuses("reviews"),
        "blob refs": sorted(store.blob_refs()),
        "export": [_without_stamp(line) for line in export.getvalue().splitlines()],
    }


@pytest.fixture(scope="module")
def expected(template: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Everything the reading APIs return on a writable copy of the store."""
    copy = tmp_path_factory.mktemp("writable") / "cairn.db"
    shutil.copy(template, copy)
    store = SQLiteStore(copy)
    try:
        assert not store.read_only
        return _everything(store)
    finally:
        store.close()


@contextmanager
def _file(path: Path) -> Iterator[Path]:
    with immutable(path):
        yield path


@contextmanager
def _directory(path: Path) -> Iterator[Path]:
    with immutable(path.parent):
        yield path


@contextmanager
def _mount(path: Path) -> Iterator[Path]:
    with read_only_mount(path.parent) as seen:
        yield seen / path.name


MAKERS: dict[str, Callable[[Path], AbstractContextManager[Path]]] = {
    "file": _file,
    "directory": _directory,
    "mount": _mount,
}
WHY = {
    "file": "the file itself is not writable",
    "directory": "is not writable, and SQLite writes its cairn.db-wal",
    "mount": "is mounted read-only",
}


@pytest.fixture(params=sorted(MAKERS))
def read_only(
    request: pytest.FixtureRequest, template: Path, tmp_path: Path
) -> Iterator[tuple[str, Path]]:
    """A copy of the store made read-only one way: (the way, the path to open)."""
    folder = tmp_path / "store"
    folder.mkdir()
    path = folder / "cairn.db"
    shutil.copy(template, path)
    with MAKERS[request.param](path) as seen:
        yield request.param, seen


def _snapshot(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def test_every_reading_api_works_and_returns_what_a_writable_store_does(
    read_only: tuple[str, Path], expected: dict[str, Any]
) -> None:
    """On a read-only file, directory or mount, the store opens read-only and every
    reading API (tasks, histories, operations, conversations, model calls,
    metrics, export) returns exactly what it returns on a writable copy; the
    file's bytes and mtime do not change."""
    _, path = read_only
    before = _snapshot(path)
    store = SQLiteStore(path)
    try:
        assert store.read_only
        assert _everything(store) == expected
    finally:
        store.close()
    assert _snapshot(path) == before


WRITES: dict[str, Callable[[Cairn], object]] = {
    "retry": lambda app: admin(app.store).retry_task(FAILED, app.clock.now()),
    "cancel": lambda app: admin(app.store).cancel_task(PENDING, app.clock.now()),
    "signal": lambda app: app.signal(PENDING, "approval", {"ok": True}),
    "enqueue": lambda app: app.enqueue("later", app.registered("review"), [{"app_id": "p3"}]),
    "run": lambda app: app.run(app.registered("review"), app_id="new"),
    "resolve": lambda app: admin(app.store).resolve_operation(
        "", "post/a1", "failed", result=None, permanent=True, now=app.clock.now()
    ),
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_every_write_is_refused_with_store_read_only(
    read_only: tuple[str, Path], write: str
) -> None:
    """Retrying, cancelling, signalling, enqueueing, running and settling an
    operation on a read-only store raise StoreReadOnly naming the file, why it is
    read-only and that nothing was written; the file is unchanged."""
    way, path = read_only
    before = _snapshot(path)
    with Cairn(f"sqlite:///{path}", clock=FakeClock()) as app:

        @app.task
        def review(ctx: Context, app_id: str) -> str:
            return app_id

        with pytest.raises(StoreReadOnly) as refused:
            WRITES[write](app)
        message = str(refused.value)
        assert f"the SQLite store {path} is read-only" in message
        assert WHY[way] in message
        assert "nothing was written" in message
        assert app.store.get_task(FAILED) is not None  # still readable afterwards
    assert _snapshot(path) == before


def test_a_store_that_needs_a_migration_is_refused_not_migrated(
    template: Path, tmp_path: Path
) -> None:
    """A store of an older schema on a read-only mount is not migrated: opening it
    (the API, `cairn migrate`, a reading command) raises StoreReadOnly saying
    which schema it has, that this cairn must upgrade it and how; the file is
    unchanged."""
    folder = tmp_path / "old"
    folder.mkdir()
    path = folder / "cairn.db"
    shutil.copy(template, path)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("UPDATE cairn_meta SET value = '1' WHERE key = 'schema_version'")
        conn.commit()
    with read_only_mount(folder) as seen:
        before = _snapshot(seen / "cairn.db")
        with pytest.raises(StoreReadOnly) as refused:
            SQLiteStore(seen / "cairn.db")
        migrate = _cli("migrate", "--store", f"sqlite:///{seen / 'cairn.db'}")
        tasks = _cli("tasks", "--store", f"sqlite:///{seen / 'cairn.db'}")
        assert _snapshot(seen / "cairn.db") == before
    message = str(refused.value)
    latest = latest_version("sqlite")
    assert f"holds a cairn store of schema 1, which this cairn (schema {latest})" in message
    assert "must upgrade" in message
    assert "Make it writable once" in message
    assert "Nothing was changed" in message
    for result in (migrate, tasks):
        assert result.exit_code == 2, result.output
        assert "which this cairn (schema" in " ".join(result.output.split())


def test_a_new_store_in_a_read_only_directory_is_refused_before_anything_is_made(
    tmp_path: Path,
) -> None:
    """Asking for a new store where nothing can be written raises StoreReadOnly
    naming the path and what to do, for a directory that exists and one that
    would have to be made; no file or directory is created."""
    folder = tmp_path / "locked"
    folder.mkdir()
    with immutable(folder):
        for path in (folder / "cairn.db", folder / "sub" / "cairn.db"):
            with pytest.raises(StoreReadOnly, match=r"cannot create a cairn store at .*locked"):
                Cairn(f"sqlite:///{path}").store  # noqa: B018 - opening is the test
    assert list(folder.iterdir()) == []
    with read_only_mount(folder) as seen:
        with pytest.raises(StoreReadOnly, match=r"mounted read-only.*Nothing was created"):
            SQLiteStore(seen / "cairn.db")
        assert list(seen.iterdir()) == []


def _live_writer(path: Path) -> sqlite3.Connection:
    """A connection that committed one more task after the store was built, still
    open, so the commit sits in -wal (not yet checkpointed) with -shm beside it."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("UPDATE tasks SET status = 'cancelled' WHERE id = ?", (PENDING,))
    assert path.with_name("cairn.db-wal").stat().st_size > 0
    return conn


def test_commits_still_in_the_wal_are_read_on_a_read_only_mount(
    template: Path, tmp_path: Path
) -> None:
    """A store whose latest commits are still in its -wal (its writer was killed,
    or still runs) reads them on a read-only mount: cairn opens it read-only
    with the WAL index, never from the main file alone (which would show an
    older state without saying so)."""
    folder = tmp_path / "live"
    folder.mkdir()
    shutil.copy(template, folder / "cairn.db")
    writer = _live_writer(folder / "cairn.db")
    try:
        with read_only_mount(folder) as seen:
            store = SQLiteStore(seen / "cairn.db")
            try:
                assert store.read_only
                record = store.get_task(PENDING)
                assert record is not None
                assert record.status == "cancelled"
            finally:
                store.close()
    finally:
        writer.close()


def test_commits_in_a_wal_that_cannot_be_read_are_refused_with_how_to_read_them(
    template: Path, tmp_path: Path
) -> None:
    """A -wal holding commits, without its -shm, in a directory where the -shm
    cannot be created: reading the main file alone would hide those commits, so
    opening raises StoreReadOnly that names the -wal and says how to read it."""
    live = tmp_path / "live"
    live.mkdir()
    shutil.copy(template, live / "cairn.db")
    writer = _live_writer(live / "cairn.db")
    copied = tmp_path / "copied"
    copied.mkdir()
    try:
        shutil.copy(live / "cairn.db", copied / "cairn.db")
        shutil.copy(live / "cairn.db-wal", copied / "cairn.db-wal")
    finally:
        writer.close()
    with immutable(copied), pytest.raises(StoreReadOnly) as refused:
        SQLiteStore(copied / "cairn.db")
    message = str(refused.value)
    assert "its latest commits are still in cairn.db-wal" in message
    assert "copy cairn.db and cairn.db-wal together" in message
    assert sorted(p.name for p in copied.iterdir()) == ["cairn.db", "cairn.db-wal"]


def test_a_read_only_store_stays_readable_while_another_process_writes_it(
    template: Path, tmp_path: Path
) -> None:
    """A store opened read-only because its file is immutable to this reader
    still reads consistently, and a write on it is StoreReadOnly, not a lock
    error (the reader never asks for the write lock)."""
    path = tmp_path / "cairn.db"
    shutil.copy(template, path)
    with immutable(path):
        store = SQLiteStore(path, busy_timeout_ms=50)
        try:
            assert store.read_only
            moved = store._atomically(lambda tx: tx.exec("SELECT COUNT(*) FROM tasks").rows)
            assert moved[0][0] == len(list(store.list_tasks()))
            with pytest.raises(StoreReadOnly):
                store.cancel_task(PENDING, FakeClock().now())
        except StoreUnavailable:  # pragma: no cover - the failure this test guards against
            pytest.fail("a read-only store asked for the write lock")
        finally:
            store.close()


# -- the command line ---------------------------------------------------------------------


def _cli(*args: str) -> Result:
    return CliRunner().invoke(cli_app, list(args))


READING_COMMANDS: dict[str, tuple[str, ...]] = {
    "batches": ("batches", "--json"),
    "tasks": ("tasks", "--json"),
    "tasks of a batch": ("tasks", "--batch", "reviews", "--status", "failed"),
    "show": ("show", FAILED),
    "show json": ("show", AGENT, "--json"),
    "ops": ("ops", "--json"),
    "ops in doubt": ("ops", "--in-doubt"),
    "metrics": ("metrics", "--json"),
    "conversation": ("conversation", AGENT, "--all", "--jsonl"),
    "cost": ("cost", "--batch", "agents", "--json"),
}


def test_every_reading_command_works_on_a_read_only_mount(
    template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every reading command prints the same output on a store behind a read-only
    mount as on the writable store, and exits 0; export and backup write their
    file elsewhere from it."""
    for name in ("CAIRN_STORE", "CAIRN_BLOBS", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    folder = tmp_path / "store"
    folder.mkdir()
    shutil.copy(template, folder / "cairn.db")
    writable = tmp_path / "writable.db"
    shutil.copy(template, writable)
    with read_only_mount(folder) as seen:
        url = f"sqlite:///{seen / 'cairn.db'}"
        for label, command in READING_COMMANDS.items():
            result = _cli(*command, "--store", url)
            assert result.exit_code == 0, (label, result.output)
            same = _cli(*command, "--store", str(writable))
            assert result.output == same.output.replace(str(writable), str(seen / "cairn.db"))
        exported = _cli("export", str(tmp_path / "reviews.jsonl"), "-b", "reviews", "--store", url)
        assert exported.exit_code == 0, exported.output
        backup = _cli("backup", str(tmp_path / "copy.db"), "--store", url)
        assert backup.exit_code == 0, backup.output
    lines = (tmp_path / "reviews.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert FAILED in [row["row"]["id"] for row in rows if row.get("table") == "tasks"]
    copy, original = SQLiteStore(tmp_path / "copy.db"), SQLiteStore(writable)
    try:
        assert list(copy.list_tasks()) == list(original.list_tasks())
    finally:
        copy.close()
        original.close()


def test_a_backup_copy_on_a_read_only_mount_is_readable(template: Path, tmp_path: Path) -> None:
    """A copy made by `cairn backup` (a rollback-journal file, not WAL) on a
    read-only mount opens read-only without any -shm, and reads every task."""
    shutil.copy(template, tmp_path / "cairn.db")
    folder = tmp_path / "archive"
    folder.mkdir()
    copied = _cli("backup", str(folder / "copy.db"), "--store", str(tmp_path / "cairn.db"))
    assert copied.exit_code == 0, copied.output
    with read_only_mount(folder) as seen:
        store = SQLiteStore(seen / "copy.db")
        try:
            assert store.read_only
            assert len(list(store.list_tasks())) == 6
        finally:
            store.close()
        assert sorted(p.name for p in seen.iterdir()) == ["copy.db"]


WRITING_COMMANDS: dict[str, tuple[str, ...]] = {
    "retry": ("retry", FAILED),
    "cancel": ("cancel", PENDING),
    "signal": ("signal", PENDING, "approval", '{"ok": true}'),
    "ops resolve": ("ops", "resolve", "post/bad", "--retry"),
}


@pytest.mark.parametrize("command", sorted(WRITING_COMMANDS))
def test_a_writing_command_on_a_read_only_store_says_so_in_one_line(
    command: str, template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """retry, cancel, signal and ops resolve on a read-only store exit 2
    with one red line saying the store is read-only and nothing was written; the
    file is unchanged."""
    for name in ("CAIRN_STORE", "CAIRN_BLOBS", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "cairn.db"
    shutil.copy(template, path)
    with immutable(path):
        before = _snapshot(path)
        result = _cli(*WRITING_COMMANDS[command], "--store", str(path))
        assert _snapshot(path) == before
    assert result.exit_code == 2, result.output
    line = " ".join(result.output.split())
    assert line.startswith("error: ")
    assert "is read-only" in line
    assert "Traceback" not in result.output
