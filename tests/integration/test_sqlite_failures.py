"""A SQLite store that fails under a running batch (a full disk, a lock another
process holds, a damaged file, text the driver cannot encode) raises a cairn
error at once that names the file and says what to do, never the driver's
raw error, and loses nothing recorded before it.

The disk fills for real: a small tmpfs mounted for the test, and SQLite's own
``max_page_count``, which fails the same way (``SQLITE_FULL``) where mounting is
not possible. The lock is held by another process.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cairn import Cairn, CodecError, Context, StoreError, StoreUnavailable
from cairn.cli import app as cli_app
from cairn.clock import FakeClock
from cairn.store import admin
from cairn.store.records import NewTask
from cairn.store.sqlite import SQLiteStore
from tests.filesystems import fill, small_tmpfs

BIG = 200_000  # characters in each step's output: more than a filled disk has left

# -- a full disk ---------------------------------------------------------------------------


class Disk:
    """Where the store lives, and how to fill it up and free it again."""

    def __init__(self, folder: Path, fill: Callable[[Cairn], None], free: Callable[[], None]):
        self.folder = folder
        self.fill = fill
        self.free = free


@contextmanager
def _tmpfs(tmp_path: Path) -> Iterator[Disk]:
    fillers: list[Path] = []

    def free() -> None:
        for filler in fillers:
            filler.unlink()

    with small_tmpfs(tmp_path / "disk", "4m") as folder:
        yield Disk(folder, fill=lambda app: fillers.append(fill(folder)), free=free)


@contextmanager
def _page_limit(tmp_path: Path) -> Iterator[Disk]:
    apps: list[Cairn] = []

    def limit(app: Cairn) -> None:
        conn = app.store._conn()  # type: ignore[attr-defined]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages + 2}")
        apps.append(app)

    def lift() -> None:
        for app in apps:
            app.store._conn().execute("PRAGMA max_page_count = 4294967294")  # type: ignore[attr-defined]

    folder = tmp_path / "disk"
    folder.mkdir()
    yield Disk(folder, fill=limit, free=lift)


DISKS: dict[str, Callable[[Path], AbstractContextManager[Disk]]] = {
    "tmpfs": _tmpfs,
    "max_page_count": _page_limit,
}


@pytest.mark.parametrize("way", sorted(DISKS))
def test_a_full_disk_stops_the_task_clearly_and_it_resumes_once_space_is_freed(
    way: str, tmp_path: Path
) -> None:
    """When the disk fills up between two steps, app.run raises a StoreError naming
    the store file, saying the disk is full, that nothing recorded was lost and
    to free space and run again; the steps recorded before it are intact, and once
    space is freed the same call finishes the task without running them again."""
    calls: list[int] = []
    with DISKS[way](tmp_path) as disk:
        path = disk.folder / "cairn.db"
        app = Cairn(f"sqlite:///{path}", clock=FakeClock(), inline_limit=1 << 20)

        def part(i: int) -> str:
            calls.append(i)
            if i == 1 and len(calls) == 2:
                disk.fill(app)  # the disk fills while the step works
            return str(i) * BIG

        @app.task
        def big(ctx: Context) -> int:
            return sum(len(ctx.step(f"part {i}", part, i)) for i in range(3))

        with pytest.raises(StoreError) as full:
            app.run(big, task_id="big")
        message = str(full.value)
        assert f"the disk holding the SQLite store {path} is full" in message
        assert "nothing recorded before it was lost" in message
        assert "Free space, then run again" in message
        assert "database or disk is full" in message  # the driver's words, kept
        history = app.store.load_history("big")
        assert [(r.name, r.status) for r in history.values()] == [("part 0", "completed")]
        assert history[1].output == '"' + "0" * BIG + '"'

        disk.free()
        assert app.run(big, task_id="big") == 3 * BIG
        assert calls == [0, 1, 1, 2]  # part 0 was not run again; part 1 ran, unrecorded
        app.close()


# -- a lock held by another process -------------------------------------------------------

_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
for line in sys.stdin:
    if line.strip() == "lock":
        conn.execute("BEGIN IMMEDIATE")
        print("locked", flush=True)
    elif line.strip() == "unlock":
        conn.execute("ROLLBACK")
        print("unlocked", flush=True)
"""


class Holder:
    """Another process that takes and drops the store's write lock when told."""

    def __init__(self, path: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def _say(self, word: str, answer: str) -> None:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(word + "\n")
        self.process.stdin.flush()
        assert self.process.stdout.readline().strip() == answer

    def lock(self) -> None:
        self._say("lock", "locked")

    def unlock(self) -> None:
        self._say("unlock", "unlocked")

    def close(self) -> None:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)
        self.process.stdout.close()


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[Holder]:
    SQLiteStore(tmp_path / "cairn.db").close()  # made and migrated before it is locked
    made = Holder(tmp_path / "cairn.db")
    yield made
    made.close()


def test_a_store_locked_by_another_process_is_store_unavailable_after_the_busy_timeout(
    holder: Holder, tmp_path: Path
) -> None:
    """While another process holds the write lock past the busy timeout, starting
    a task raises StoreUnavailable at once after that timeout: it names the file
    and the timeout, says another process holds the write lock, that nothing was
    lost and what to do; no task row is written, and once the lock is released the
    same call runs."""
    path = tmp_path / "cairn.db"
    app = Cairn(SQLiteStore(path, busy_timeout_ms=100), clock=FakeClock())

    @app.task
    def noop(ctx: Context, n: int) -> int:
        return n

    holder.lock()
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as locked:
        app.run(noop, n=1)
    # Far below the 30 s default: the configured timeout was used, nothing hung.
    assert time.monotonic() - started < 10
    message = str(locked.value)
    assert f"the SQLite store {path} stayed locked for 0.1s" in message
    assert "another process holds its write lock" in message
    assert "Nothing recorded was lost" in message
    assert "database is locked" in message
    holder.unlock()
    assert list(admin(app.store).list_tasks()) == []
    assert app.run(noop, n=1) == 1
    app.close()


def test_a_lock_taken_while_a_step_works_stops_the_task_and_spends_no_attempt(
    holder: Holder, tmp_path: Path
) -> None:
    """A lock another process takes while a step works makes recording the step
    raise StoreUnavailable (not a failed step or task); the task's attempts are
    not spent, and it finishes once the lock is gone."""
    app = Cairn(SQLiteStore(tmp_path / "cairn.db", busy_timeout_ms=100), clock=FakeClock())
    calls: list[str] = []

    def work() -> str:
        calls.append("work")
        if len(calls) == 1:
            holder.lock()
        return "done"

    @app.task
    def task(ctx: Context) -> str:
        return ctx.step("work", work)

    with pytest.raises(StoreUnavailable, match="stayed locked"):
        app.run(task, task_id="t")
    holder.unlock()
    record = app.store.get_task("t")
    assert record is not None
    assert record.error is None
    assert app.run(task, task_id="t") == "done"
    assert calls == ["work", "work"]
    app.close()


def test_a_claim_that_finds_nothing_takes_no_write_lock(holder: Holder, tmp_path: Path) -> None:
    """An idle claimer on SQLite looks with a read before it writes: while another
    process holds the store's write lock (a writer that is stuck, or paused), a
    claim that finds nothing pending returns None at once instead of queueing for
    the lock; and once there is work, claiming it needs the lock as before."""
    store = SQLiteStore(tmp_path / "cairn.db", busy_timeout_ms=100)
    now = datetime(2026, 5, 24, tzinfo=UTC)
    holder.lock()
    try:
        assert store.claim_next_pending(None, "me", now, now, names=("job",)) is None
        assert store.claim_next_pending("b", "me", now, now) is None
    finally:
        holder.unlock()
    store.enqueue([NewTask("b/1", "job", "{}", "json", "b", "1")], now)
    holder.lock()
    try:
        with pytest.raises(StoreUnavailable, match="stayed locked"):
            store.claim_next_pending("b", "me", now, now)
    finally:
        holder.unlock()
    claimed = store.claim_next_pending("b", "me", now, now)
    assert claimed is not None
    assert claimed.id == "b/1"
    store.close()


# -- a damaged file -----------------------------------------------------------------------


def _damage(path: Path) -> None:
    """Overwrite every page after the first (the schema) with garbage."""
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    data[page:] = b"\xa5" * (len(data) - page)
    path.write_bytes(bytes(data))


def test_a_damaged_store_file_is_a_store_error_that_says_how_to_recover(
    tmp_path: Path,
) -> None:
    """A store file whose pages are damaged raises StoreError (from the API, and one
    red line from the CLI) naming the file and saying to restore a backup or run
    sqlite3's .recover; never the driver's raw error."""
    path = tmp_path / "cairn.db"
    with Cairn(f"sqlite:///{path}", clock=FakeClock()) as app:

        @app.task
        def noop(ctx: Context, n: int) -> int:
            return n

        app.run_batch("b", noop, [{"n": i} for i in range(50)], progress=False)
    _damage(path)

    def read() -> None:
        store = SQLiteStore(path)
        try:
            list(store.list_tasks())
        finally:
            store.close()

    with pytest.raises(StoreError) as damaged:
        read()
    message = str(damaged.value)
    assert f"the SQLite store {path} is damaged" in message
    assert ".recover" in message
    result = CliRunner().invoke(cli_app, ["tasks", "--store", str(path)])
    assert result.exit_code == 2
    assert "is damaged" in result.output
    assert "Traceback" not in result.output


# -- text the driver cannot encode ---------------------------------------------------------


def test_a_lone_surrogate_that_reaches_the_driver_is_a_codec_error_naming_the_text(
    tmp_path: Path,
) -> None:
    """Text holding a lone surrogate that reaches the store without going through
    the codec or the name checks (a store method called directly, a command-line
    argument that is not UTF-8) raises CodecError quoting the text, not the
    driver's UnicodeEncodeError; nothing is written."""
    path = tmp_path / "cairn.db"
    store = SQLiteStore(path)
    try:
        with pytest.raises(CodecError) as refused:
            store.ensure_batch("batch\ud800", "task", FakeClock().now())
        message = str(refused.value)
        assert "lone surrogate ('\\ud800' at position 5" in message
        assert "'batch\\ud800'" in message
        assert "Nothing was written" in message
        assert store.batch_summaries() == []
    finally:
        store.close()
    # What Python makes of the argument bytes b"t\xff" in a UTF-8 locale.
    result = CliRunner().invoke(cli_app, ["show", "t\udcff", "--store", str(path)])
    assert result.exit_code == 2
    assert "lone surrogate ('\\udcff' at position 1" in result.output
    assert "Traceback" not in result.output
