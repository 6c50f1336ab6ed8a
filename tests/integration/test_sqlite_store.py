"""The SQLite store: WAL and sync settings, migrations, fenced writes, indexed claims."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cairn import Cairn, Context
from cairn.store import groupcommit
from cairn.store.migrate import latest_version
from cairn.store.records import NewTask, StepRecord
from cairn.store.sqlite import SQLiteStore
from tests.servers import wait_until

NOW = datetime(2026, 5, 24, tzinfo=UTC)
LEASE_UNTIL = NOW + timedelta(seconds=30)


@pytest.fixture
def store(db_path: Path) -> Iterator[SQLiteStore]:
    opened = SQLiteStore(db_path)
    yield opened
    opened.close()


def _pragma(conn: sqlite3.Connection, name: str) -> object:
    row = conn.execute(f"PRAGMA {name}").fetchone()
    return row[0]


def _schema_version(path: Path) -> int:
    conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT value FROM cairn_meta WHERE key = 'schema_version'")
        return int(row.fetchone()[0])
    finally:
        conn.close()


def _tasks(batch: str, ids: range) -> list[NewTask]:
    return [NewTask(f"{batch}/{i}", "job", "{}", "json", batch, str(i)) for i in ids]


def _step(task_id: str, seq: int, output: str = '"ok"') -> StepRecord:
    return StepRecord(
        task_id=task_id,
        seq=seq,
        kind="step",
        name=f"step{seq}",
        status="completed",
        output=output,
        attempts=1,
        task_attempt=1,
        run_attempts=1,
        error=None,
        retry_at=None,
        started_at=NOW,
        finished_at=NOW,
    )


# -- opening --------------------------------------------------------------------------------


def test_a_new_store_is_in_wal_mode(store: SQLiteStore, db_path: Path) -> None:
    """Opening a new file puts it in WAL mode, which the file itself remembers."""
    assert _pragma(store._conn(), "journal_mode") == "wal"
    plain = sqlite3.connect(db_path)
    try:
        assert _pragma(plain, "journal_mode") == "wal"
    finally:
        plain.close()


def _synchronous_in_a_new_thread(store: SQLiteStore) -> object:
    found: list[object] = []
    worker = threading.Thread(target=lambda: found.append(_pragma(store._conn(), "synchronous")))
    worker.start()
    worker.join(timeout=30)
    return found[0]


def test_synchronous_is_normal_by_default(store: SQLiteStore) -> None:
    """By default every connection of the store runs with synchronous=NORMAL (1)."""
    assert _pragma(store._conn(), "synchronous") == 1
    assert _synchronous_in_a_new_thread(store) == 1


def test_synchronous_full_when_asked(db_path: Path) -> None:
    """``Cairn(synchronous="FULL")`` gives every connection synchronous=FULL (2)."""
    with Cairn(f"sqlite:///{db_path}", synchronous="FULL") as app:
        store = app.store
        assert isinstance(store, SQLiteStore)
        assert _pragma(store._conn(), "synchronous") == 2
        assert _synchronous_in_a_new_thread(store) == 2


def test_migrations_bring_a_new_file_to_the_latest_schema(
    store: SQLiteStore, db_path: Path
) -> None:
    """A new store is at the latest schema version, with one version row."""
    assert _schema_version(db_path) == latest_version("sqlite")
    rows = store._conn().execute("SELECT key FROM cairn_meta").fetchall()
    assert rows == [("schema_version",)]


def test_reopening_a_current_store_does_not_migrate_again(db_path: Path) -> None:
    """Reopening an up-to-date store runs no migration: it opens even while another
    connection holds the write lock, and keeps the data it had."""
    first = SQLiteStore(db_path)
    first.enqueue(_tasks("b", range(3)), NOW)
    first.close()
    schema = _schema_sql(db_path)

    writer = sqlite3.connect(db_path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        again = SQLiteStore(db_path, busy_timeout_ms=200)
        assert [t.id for t in again.list_tasks()] == ["b/0", "b/1", "b/2"]
        again.close()
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert _schema_sql(db_path) == schema
    assert _schema_version(db_path) == latest_version("sqlite")


def _schema_sql(path: Path) -> list[tuple[str, str]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall()
    finally:
        conn.close()


def _open_at_once(path: Path, threads: int) -> tuple[list[SQLiteStore], list[BaseException]]:
    """Open ``path`` from ``threads`` threads released together by a barrier."""
    barrier = threading.Barrier(threads, timeout=30)
    opened: list[SQLiteStore] = []
    errors: list[BaseException] = []

    def open_it() -> None:
        barrier.wait()
        try:
            opened.append(SQLiteStore(path))
        except BaseException as exc:  # noqa: BLE001 - reported by the caller's assert
            errors.append(exc)

    workers = [threading.Thread(target=open_it) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    return opened, errors


def test_threads_opening_a_new_file_at_once_all_succeed(tmp_path: Path) -> None:
    """Several threads creating the same new store at the same moment all open it,
    and it ends at the latest schema version."""
    for round_ in range(5):
        path = tmp_path / f"race{round_}.db"
        opened, errors = _open_at_once(path, 4)
        assert errors == []
        assert len(opened) == 4
        for store in opened:
            store.enqueue(_tasks("b", range(2)), NOW)
            store.close()
        assert _schema_version(path) == latest_version("sqlite")


def test_opening_a_new_file_waits_for_a_brief_writer(db_path: Path) -> None:
    """While another connection holds the write lock on a new file for a moment,
    opening the store waits for it instead of failing with "database is locked"."""
    holder = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    # The other writer lets go after a moment, as a real one would.
    release = threading.Timer(0.3, lambda: holder.execute("ROLLBACK"))  # real-sleep-ok: a writer
    release.start()
    try:
        store = SQLiteStore(db_path, busy_timeout_ms=20_000)
        store.close()
    finally:
        release.join(timeout=30)
        holder.close()
    assert _schema_version(db_path) == latest_version("sqlite")


_OPENER = """
import sys, time
from pathlib import Path
from datetime import datetime, UTC
from cairn.store.sqlite import SQLiteStore
from cairn.store.records import NewTask

db, ready, go = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
ready.touch()
while not go.exists():
    time.sleep(0.002)  # real-sleep-ok: both openers start on the test's signal
store = SQLiteStore(db)
print(store.enqueue([NewTask("t", "job", "{}", "json")], datetime.now(UTC)), flush=True)
store.close()
"""


def test_processes_opening_a_new_file_at_once_both_succeed(db_path: Path, tmp_path: Path) -> None:
    """Two processes creating the same new store at the same moment both open it;
    exactly one of them inserts the shared task."""
    go = tmp_path / "go"
    readies = [tmp_path / f"ready{i}" for i in range(2)]
    openers = [
        subprocess.Popen(
            [sys.executable, "-c", _OPENER, str(db_path), str(ready), str(go)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for ready in readies
    ]
    try:
        deadline = time.monotonic() + 60
        while not all(ready.exists() for ready in readies):
            assert time.monotonic() < deadline, "the openers did not start"
            time.sleep(0.01)  # real-sleep-ok: waiting on a real subprocess
        go.touch()
        outputs = [opener.communicate(timeout=60)[0].strip() for opener in openers]
    finally:
        for opener in openers:
            if opener.poll() is None:
                opener.kill()
                opener.communicate()
    assert [opener.returncode for opener in openers] == [0, 0]
    assert sorted(outputs) == ["0", "1"]
    assert _schema_version(db_path) == latest_version("sqlite")


# -- writing ------------------------------------------------------------------------------


def open_on(path: Path) -> int:
    """How many file descriptors this process holds open on the write-ahead log
    of the store at ``path``: one per open connection. (Not the store file
    itself: SQLite keeps a closed connection's descriptor on it open, for reuse,
    while another connection of the process holds a lock on it.)"""
    target = str(path.resolve()) + "-wal"
    count = 0
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):  # an fd closed while we look
            count += str(fd.readlink()) == target
    return count


def test_a_thread_s_connection_is_closed_when_the_thread_ends(
    store: SQLiteStore, db_path: Path
) -> None:
    """Forty short-lived threads each read the store (each with a connection of
    its own) and end without calling close_thread: once they have ended, their
    connections are closed, none left open on the file, and the store works on."""
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc to count open files")
    store.get_task("warm")
    before = open_on(db_path)
    reading = threading.Barrier(40)

    def read() -> None:
        store.get_task("x")
        reading.wait(30)  # all forty hold a connection at once

    threads = [threading.Thread(target=read) for _ in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert open_on(db_path) == before
    assert store.get_task("x") is None


def test_the_group_commit_thread_leaves_no_connection_when_it_ends(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit thread that serves async tasks' grouped writes ends when idle
    (here after 0.05 s) and a new one starts with the next write: each one's
    connection is closed as it ends."""
    monkeypatch.setattr(groupcommit, "_IDLE_SECONDS", 0.05)
    app = Cairn(f"sqlite:///{db_path}", synchronous="FULL")

    async def double(n: int) -> int:
        return n * 2

    @app.task
    async def job(ctx: Context, n: int) -> int:
        return await ctx.step("double", double, n)

    try:
        app.run(job, n=0)
        assert wait_until(lambda: not _commit_threads(), 30)
        before = open_on(db_path)
        for n in range(1, 6):
            assert app.run(job, n=n) == 2 * n
            assert wait_until(lambda: not _commit_threads(), 30)
        # Another thread of the run (one that kept the task's logs, say) closes
        # its connection as it ends, which may be a moment after the task: what
        # must not happen is a connection left open for good.
        assert wait_until(lambda: open_on(db_path) == before, 30), open_on(db_path)
    finally:
        app.close()


def _commit_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "cairn-group-commit"]


def test_record_step_with_a_stale_fence_writes_nothing(store: SQLiteStore) -> None:
    """A step written under a fence the task no longer has is refused (False) and
    leaves no row; under the current fence it is written."""
    store.create_task(NewTask("t", "job", "{}", "json"), NOW)
    claimed = store.claim_task("t", 0, "me", LEASE_UNTIL, NOW)
    assert claimed is not None
    assert claimed.fence == 1

    assert store.record_step(_step("t", 1), fence=0) is False
    assert store.load_history("t") == {}
    assert store.record_step(_step("t", 1), fence=1) is True
    assert list(store.load_history("t")) == [1]

    reclaimed = store.claim_task("t", 1, "someone else", LEASE_UNTIL, NOW, owner_gone=True)
    assert reclaimed is not None
    assert store.record_step(_step("t", 1, '"overwritten"'), fence=1) is False
    assert store.record_step(_step("t", 2), fence=1) is False
    history = store.load_history("t")
    assert list(history) == [1]
    assert history[1].output == '"ok"'


def test_enqueue_is_idempotent(store: SQLiteStore) -> None:
    """Enqueueing the same ids again adds nothing; the count returned is of new tasks."""
    store.ensure_batch("b", "job", NOW)
    assert store.enqueue(_tasks("b", range(3)), NOW) == 3
    assert store.enqueue(_tasks("b", range(3)), NOW) == 0
    assert store.enqueue(_tasks("b", range(5)), NOW) == 2
    assert [t.id for t in store.list_tasks(batch="b")] == [f"b/{i}" for i in range(5)]
    assert store.batch_counts("b") == {"pending": 5}


# -- reading cheaply ------------------------------------------------------------------------


def _traced(store: SQLiteStore, action: object) -> list[str]:
    statements: list[str] = []
    conn = store._conn()
    conn.set_trace_callback(statements.append)
    try:
        assert callable(action)
        action()
    finally:
        conn.set_trace_callback(None)
    # SQLite reports a statement again as each trigger program it starts begins
    # (an update of a task's status starts schema 13's singleton trigger, whose
    # WHEN then finds nothing to do): one statement, listed once.
    return [s for i, s in enumerate(statements) if i == 0 or s != statements[i - 1]]


def test_claim_queries_use_the_batch_indexes(store: SQLiteStore) -> None:
    """Claiming the next pending task of a batch (a read that finds it, then the
    claim) searches the batch's index of pending rows, and listing its running
    ones the (batch, status) index; none scans the tasks table.
    (tests/integration/test_claim_plans.py checks every claim statement with
    100,000 finished rows, on both stores.)"""
    store.ensure_batch("b", "job", NOW)
    store.enqueue(_tasks("b", range(10)), NOW)
    statements = _traced(
        store,
        lambda: (
            store.claim_next_pending("b", "me", LEASE_UNTIL, NOW),
            store.running_tasks("b"),
        ),
    )
    indexes = ("tasks_pending_by_batch", "tasks_pending_by_batch", "tasks_by_batch_status")
    assert len(statements) == len(indexes)
    for sql, index in zip(statements, indexes, strict=True):
        plan = [row[3] for row in store._conn().execute(f"EXPLAIN QUERY PLAN {sql}")]
        assert any(index in step for step in plan), plan
        assert not any(step.startswith("SCAN tasks") for step in plan), plan


def _claim_cost(path: Path, finished: int) -> int:
    """VM instructions SQLite runs to claim the one pending task among ``finished``."""
    store = SQLiteStore(path)
    try:
        store.ensure_batch("b", "job", NOW)
        store.enqueue(_tasks("b", range(finished)), NOW)
        store._conn().execute("UPDATE tasks SET status = 'completed'")
        store.enqueue(_tasks("b", range(finished, finished + 1)), NOW)
        steps = 0

        def count() -> int:
            nonlocal steps
            steps += 1
            return 0

        store._conn().set_progress_handler(count, 1)
        claimed = store.claim_next_pending("b", "me", LEASE_UNTIL, NOW)
        store._conn().set_progress_handler(None, 1)
        assert claimed is not None
        assert claimed.id == f"b/{finished}"
        return steps
    finally:
        store.close()


def test_claim_cost_does_not_grow_with_finished_tasks(tmp_path: Path) -> None:
    """Claiming the next task costs the same with 5,000 finished tasks as with 5:
    resuming a big, mostly finished batch is cheap."""
    few = _claim_cost(tmp_path / "few.db", 5)
    many = _claim_cost(tmp_path / "many.db", 5000)
    assert many <= few * 1.2 + 20, (few, many)


def test_load_history_reads_every_row_in_one_query(store: SQLiteStore) -> None:
    """A task's whole history comes back from a fixed number of SELECTs, however
    long it is: one over its steps, one over the operations it completed (an
    operation's row is its history entry), keyed by position."""
    store.create_task(NewTask("t", "job", "{}", "json"), NOW)
    store.claim_task("t", 0, "me", LEASE_UNTIL, NOW)
    for seq in range(1, 51):
        assert store.record_step(_step("t", seq, f'"out{seq}"'), fence=1)
    store.create_task(NewTask("other", "job", "{}", "json"), NOW)

    loaded: list[dict[int, StepRecord]] = []
    statements = _traced(store, lambda: loaded.append(store.load_history("t")))
    assert len(statements) == 2
    assert all(s.lstrip().upper().startswith("SELECT") for s in statements)
    (history,) = loaded
    assert sorted(history) == list(range(1, 51))
    assert history[50] == _step("t", 50, '"out50"')
    short: list[dict[int, StepRecord]] = []
    assert len(_traced(store, lambda: short.append(store.load_history("other")))) == 2
    assert store.load_history("other") == {}
