"""What only the PostgreSQL store has: a schema of its own, migrations under an
advisory lock, reconnecting, a connection pool, and errors that name the server
without its password.

Every test here but the SQLite half of the canonical-schema check needs a
PostgreSQL server (``pg_url``: a migrated database of its own; ``blank_pg``: an
empty one, for what happens before cairn ever ran). The behaviour both backends
share is covered by the conformance suite (the ``store_url`` tests).

The canonical schemas (``canonical_schema_postgres.json``,
``canonical_schema_sqlite.json``) are the reviewable contract of what the
migrations build. After an intended schema change, regenerate them with
``CAIRN_WRITE_CANONICAL_SCHEMA=1 pytest tests/integration/test_postgres_store.py``
and review the diff.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
import pytest

from cairn import Cairn, Context
from cairn.clock import FakeClock
from cairn.engine.claim import WAIT, Claimer
from cairn.errors import SchemaTooNew, StoreError, StoreReadOnly, StoreUnavailable
from cairn.store import Capabilities, open_store, pgpool
from cairn.store.migrate import latest_version
from cairn.store.pgwatch import WatchedConnection
from cairn.store.postgres import PostgresStore
from cairn.store.records import NewTask
from tests.conftest import postgres_admin_url, with_database
from tests.pgcluster import Cluster
from tests.schemas import (
    CANONICAL_POSTGRES,
    CANONICAL_SQLITE,
    check_canonical,
    describe_postgres,
    describe_sqlite,
)
from tests.servers import wait_until

# The tables the migrations build, as the reviewed contract lists them.
CAIRN_TABLES = set(json.loads(CANONICAL_POSTGRES.read_text(encoding="utf-8")))
PASSWORD = "pw-Zq81-never-shown"
# A private PostgreSQL cluster a test may stop and start (never the shared server).
# Nothing listens on port 1: connecting is refused at once.
UNREACHABLE = "postgresql://postgres@127.0.0.1:1/cairn"


def with_params(url: str, **params: str) -> str:
    """``url`` with ``params`` added to its query string."""
    parts = urlsplit(url)
    query = urlencode([*parse_qsl(parts.query), *params.items()])
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


def with_password(url: str, password: str) -> str:
    """``url`` with ``password`` for its user (trust authentication ignores it)."""
    parts = urlsplit(url)
    user, _, host = parts.netloc.rpartition("@")
    netloc = f"{user.split(':')[0]}:{password}@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def sql(url: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one statement on a connection of its own (not the store's); its rows."""
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(statement.encode(), params)
        return cursor.fetchall() if cursor.description else []


@pytest.fixture
def blank_pg(pg_template: str) -> Iterator[str]:
    """A new, empty PostgreSQL database: cairn never opened it. (``pg_template``
    is asked for so the test is skipped, like the others, without a server.)"""
    admin = postgres_admin_url()
    name = f"cairn_blank_{os.getpid()}_{time.monotonic_ns()}"
    sql(admin, f"CREATE DATABASE {name} TEMPLATE template0")
    yield with_database(admin, name)
    sql(admin, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def one_step_task(app: Cairn, runs: Counter[str]) -> Any:
    """A task ``work(n)`` with one step that counts its runs in ``runs``."""

    def count(n: int) -> int:
        runs[f"work {n}"] += 1
        return n * 10

    @app.task(name="work")
    def work(ctx: Context, n: int) -> int:
        return int(ctx.step("count", count, n))

    return work


# -- where cairn's tables live ------------------------------------------------------------


def tables_of(url: str, schema: str) -> set[str]:
    rows = sql(
        url,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
        (schema,),
    )
    return {name for (name,) in rows}


def test_cairn_keeps_to_its_schema_and_leaves_an_app_tasks_table_alone(blank_pg: str) -> None:
    """An application's own ``public.tasks`` table, there before cairn first opens
    the database, keeps exactly its rows after a batch runs: cairn's tables are all
    in schema ``cairn`` and none is added to ``public``."""
    sql(blank_pg, "CREATE TABLE public.tasks (id INTEGER PRIMARY KEY, title TEXT NOT NULL)")
    sql(blank_pg, "INSERT INTO public.tasks VALUES (1, 'water the plants'), (2, 'call mum')")
    runs: Counter[str] = Counter()
    with Cairn(blank_pg, clock=FakeClock()) as app:
        report = app.run_batch(
            "b", one_step_task(app, runs), [{"n": n} for n in range(3)], progress=False
        )
        assert app.store.capabilities == Capabilities(
            multi_host=True, multi_process=True, file_based=False
        )
    assert report.completed == 3
    assert sql(blank_pg, "SELECT id, title FROM public.tasks ORDER BY id") == [
        (1, "water the plants"),
        (2, "call mum"),
    ]
    assert tables_of(blank_pg, "public") == {"tasks"}
    assert tables_of(blank_pg, "cairn") == CAIRN_TABLES
    assert sql(blank_pg, "SELECT count(*) FROM cairn.tasks") == [(3,)]


def test_a_custom_schema_holds_a_store_apart_from_the_default_one(pg_url: str) -> None:
    """``?schema=other`` puts a second, complete store in the same database (the
    same canonical tables): a task run there is not seen by the default store, and
    the same task id in the default store is a task of its own."""
    other_url = with_params(pg_url, schema="other")
    runs: Counter[str] = Counter()
    with Cairn(other_url, clock=FakeClock()) as other:
        assert other.run(one_step_task(other, runs), task_id="t", n=1) == 10
    with Cairn(pg_url, clock=FakeClock()) as default:
        assert default.store.get_task("t") is None
        assert default.run(one_step_task(default, runs), task_id="t", n=2) == 20
    with Cairn(other_url, clock=FakeClock()) as other:
        task = other.store.get_task("t")
        assert task is not None
        assert task.result == "10"
    assert runs == Counter({"work 1": 1, "work 2": 1})
    assert tables_of(pg_url, "other") == CAIRN_TABLES
    assert describe_postgres(pg_url, "other") == describe_postgres(pg_url, "cairn")


# -- migrations ---------------------------------------------------------------------------


def snapshot(url: str) -> dict[str, Any]:
    """Everything a refused open must leave alone: the schema, its version, the rows."""
    return {
        "schema": describe_postgres(url, "cairn"),
        "meta": sql(url, "SELECT key, value FROM cairn.cairn_meta ORDER BY key"),
        "tasks": sql(url, "SELECT id, status, fence FROM cairn.tasks ORDER BY id"),
    }


def test_a_schema_from_a_newer_cairn_is_refused_and_left_unchanged(pg_url: str) -> None:
    """A database whose ``cairn.cairn_meta`` says schema 999 is refused with
    SchemaTooNew naming the versions and the upgrade command, and nothing in it
    changes."""
    with Cairn(pg_url, clock=FakeClock()) as app:
        app.run(one_step_task(app, Counter()), task_id="t", n=1)
    sql(pg_url, "UPDATE cairn.cairn_meta SET value = '999' WHERE key = 'schema_version'")
    before = snapshot(pg_url)
    with pytest.raises(SchemaTooNew) as refused:
        open_store(pg_url)
    message = str(refused.value)
    for part in ("999", f"up to {latest_version('postgres')}", "pip install -U cairn-durable"):
        assert part in message
    assert "Nothing was changed" in message
    assert snapshot(pg_url) == before


def install_ddl_log(url: str) -> None:
    """Log every DDL command run in the database, whoever runs it, to public.ddl_log."""
    sql(url, "CREATE TABLE public.ddl_log (tag TEXT NOT NULL)")
    sql(
        url,
        "CREATE FUNCTION public.log_ddl() RETURNS event_trigger LANGUAGE plpgsql AS "
        "$$ BEGIN INSERT INTO public.ddl_log (tag) VALUES (tg_tag); END $$",
    )
    sql(url, "CREATE EVENT TRIGGER log_ddl ON ddl_command_start EXECUTE FUNCTION public.log_ddl()")


def test_opening_a_migrated_database_again_runs_no_migration(blank_pg: str) -> None:
    """The first open of a blank database runs the migrations (an event trigger sees
    the DDL); opening it again, as a store and as an app, runs no DDL at all."""
    install_ddl_log(blank_pg)
    PostgresStore(blank_pg).close()
    first = sql(blank_pg, "SELECT tag FROM public.ddl_log")
    assert ("CREATE SCHEMA",) in first
    assert ("CREATE TABLE",) in first
    PostgresStore(blank_pg).close()
    with Cairn(blank_pg) as app:
        assert app.store.get_task("none") is None
    assert sql(blank_pg, "SELECT tag FROM public.ddl_log") == first
    version = sql(blank_pg, "SELECT value FROM cairn.cairn_meta WHERE key = 'schema_version'")
    assert version == [(str(latest_version("postgres")),)]


_OPENER = """
import sys, time
from pathlib import Path
from cairn.store.postgres import PostgresStore
from cairn.store.records import NewTask

url, ready, go = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
ready.touch()
while not go.exists():
    time.sleep(0.002)  # real-sleep-ok: the openers start on the test's signal
store = PostgresStore(url)
print(store.get_task("none"), flush=True)
store.close()
"""


def start_openers(url: str, tmp: Path, count: int) -> list[subprocess.Popen[str]]:
    """``count`` processes that each open the store at ``url`` on one signal."""
    go = tmp / "go"
    openers = [
        subprocess.Popen(
            [sys.executable, "-c", _OPENER, url, str(tmp / f"ready{i}"), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(count)
    ]
    deadline = time.monotonic() + 60
    while not all((tmp / f"ready{i}").exists() for i in range(count)):
        assert time.monotonic() < deadline, "the openers did not start"
        assert all(p.poll() is None for p in openers), "an opener died while starting"
        time.sleep(0.01)  # real-sleep-ok: waiting on real subprocesses
    go.touch()
    return openers


def test_processes_opening_a_blank_database_at_once_all_succeed(
    blank_pg: str, tmp_path: Path
) -> None:
    """Two processes open a database cairn never saw at the same moment: the advisory
    lock lets one migrate while the other waits, so both open it, and the schema is
    there once, at the latest version."""
    openers = start_openers(blank_pg, tmp_path, 2)
    results = []
    try:
        for opener in openers:
            out, err = opener.communicate(timeout=60)
            results.append((opener.returncode, out.strip(), err))
    finally:
        for opener in openers:
            if opener.poll() is None:
                opener.kill()
                opener.communicate()
    assert [(code, out) for code, out, _ in results] == [(0, "None"), (0, "None")], results
    assert tables_of(blank_pg, "cairn") == CAIRN_TABLES
    version = sql(blank_pg, "SELECT value FROM cairn.cairn_meta WHERE key = 'schema_version'")
    assert version == [(str(latest_version("postgres")),)]


# -- the canonical schemas ----------------------------------------------------------------


def test_postgres_migrations_build_the_canonical_schema(pg_url: str) -> None:
    """A migrated database's tables, columns (type, nullability) and indexes are
    exactly those in canonical_schema_postgres.json."""
    check_canonical(describe_postgres(pg_url, "cairn"), CANONICAL_POSTGRES)


def test_sqlite_migrations_build_the_canonical_schema(tmp_path: Path) -> None:
    """A migrated SQLite file's tables, columns (type, nullability, primary key) and
    indexes are exactly those in canonical_schema_sqlite.json. (SQLite only: it
    needs no server.)"""
    path = tmp_path / "cairn.db"
    open_store(f"sqlite:///{path}").close()
    check_canonical(describe_sqlite(path), CANONICAL_SQLITE)


def test_a_schema_mismatch_is_reported_as_a_diff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the schema differs from the checked-in description, the failure shows a
    unified diff naming the changed column and says how to regenerate the file."""
    monkeypatch.delenv("CAIRN_WRITE_CANONICAL_SCHEMA", raising=False)
    canonical = tmp_path / "canonical.json"
    canonical.write_text(json.dumps({"t": {"columns": ["a text NOT NULL"]}}, indent=2) + "\n")
    with pytest.raises(pytest.fail.Exception) as failed:
        check_canonical({"t": {"columns": ["a text"]}}, canonical)
    message = str(failed.value)
    changed = [line.split() for line in message.splitlines() if line[:1] in "+-"]
    assert ["-", '"a', "text", "NOT", 'NULL"'] in changed
    assert ["+", '"a', 'text"'] in changed
    assert "CAIRN_WRITE_CANONICAL_SCHEMA=1" in message


# -- connections: lost, exhausted, unreachable ---------------------------------------------


def terminate_connections(url: str) -> int:
    """End every server connection to the database of ``url`` (not this one's own),
    as a server restart would; how many were ended."""
    database = urlsplit(url).path.lstrip("/")
    rows = sql(
        postgres_admin_url(),
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = %s AND pid <> pg_backend_pid()",
        (database,),
    )
    return len(rows)


def test_connections_lost_mid_batch_are_reopened_and_every_step_runs_once(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The server ends all of the store's connections from inside a step of the 3rd
    task: cairn logs "PostgreSQL connection lost", reconnects, records that step's
    result, and the batch completes with every step run exactly once."""
    runs: Counter[str] = Counter()
    ended: list[int] = []

    def step(n: int) -> int:
        runs[f"step {n}"] += 1
        if n == 2 and not ended:
            ended.append(terminate_connections(pg_url))
        return n

    with Cairn(pg_url, clock=FakeClock()) as app:

        @app.task(name="item")
        def item(ctx: Context, n: int) -> int:
            return int(ctx.step("step", step, n)) + int(ctx.step("after", lambda: 1))

        with caplog.at_level(logging.WARNING, logger="cairn"):
            report = app.run_batch(
                "b", item, [{"n": n} for n in range(5)], concurrency=1, progress=False
            )
        histories = [app.store.load_history(f"b/n={n}") for n in range(5)]
    assert ended[0] >= 1, "the store had no connection to end"
    assert (report.completed, report.failures) == (5, [])
    assert runs == Counter({f"step {n}": 1 for n in range(5)})
    assert all(len(h) == 2 for h in histories)
    assert any("PostgreSQL connection lost" in r.getMessage() for r in caplog.records)


def test_an_exhausted_pool_makes_a_call_wait_then_succeed(
    pg_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``?pool_size=1`` and its one connection checked out by another thread,
    a store call waits, logs that all 1 connections are in use (true: the one is
    out), and succeeds as soon as the connection is given back.

    cairn logs after a thread has waited 5 s; the test shortens that to 0.05 s."""
    monkeypatch.setattr(pgpool, "POOL_WAIT", 0.05)
    store = PostgresStore(with_params(pg_url, pool_size="1"))
    held, release = threading.Event(), threading.Event()
    found: list[object] = []

    def hold_the_only_connection(conn: psycopg.Connection[Any]) -> None:
        held.set()
        release.wait(60)

    holder = threading.Thread(target=store._pool.run, args=(hold_the_only_connection,))
    caller = threading.Thread(target=lambda: found.append(store.get_task("none")))
    try:
        holder.start()
        assert held.wait(timeout=10)
        with caplog.at_level(logging.WARNING, logger="cairn"):
            caller.start()
            logged = wait_until(lambda: bool(logged_lines(caplog, "connections are in use")), 30)
            waiting = caller.is_alive()
            release.set()
            caller.join(timeout=30)
    finally:
        release.set()
        holder.join(timeout=10)
        store.close()
    assert logged
    assert waiting, "the call did not wait for the only connection"
    assert found == [None]
    assert set(logged_lines(caplog, "connections are in use")) == {
        "cairn: all 1 PostgreSQL connections are in use; waiting for one "
        "(raise pool_size in the store URL if this persists)"
    }


def test_a_pool_held_busy_does_not_keep_the_heartbeat_from_renewing(pg_url: str) -> None:
    """Every pooled connection is held by a statement stuck behind a lock (two
    threads asking for a shared limit whose row another session has locked),
    for longer than several heartbeats of a 0.6 s lease. The lease keeper must
    still renew the running task's lease meanwhile (it has a connection of its
    own), so the task never looks lapsed to a taker; once the lock goes, the
    stuck calls and the task finish.

    Whether a renewal lands is waited for as a condition (the lease in the
    store moving past the expiry read once the pool was full), never timed."""
    app = Cairn(with_params(pg_url, pool_size="2"), lease=0.6)
    store = app.store
    assert isinstance(store, PostgresStore)
    started, release = threading.Event(), threading.Event()

    def wait_to_be_released() -> str:
        started.set()
        release.wait(120)
        return "done"

    @app.task(name="held")
    def held(ctx: Context) -> str:
        return str(ctx.step("wait", wait_to_be_released))

    def lease_of(conn: psycopg.Connection[Any]) -> Any:
        return conn.execute("SELECT lease_expires_at FROM cairn.tasks WHERE id = 'held'").fetchone()

    results: list[object] = []
    runner = threading.Thread(target=lambda: results.append(app.run(held)))
    stuck: list[threading.Thread] = []
    with psycopg.connect(pg_url) as locker:  # a transaction, held open until the end
        try:
            runner.start()
            assert started.wait(30)
            now = app.clock.now()
            store.acquire_permit("api", 1, timedelta(0), "p0", "o", "t", now, now)
            locker.execute("SELECT name FROM cairn.limits WHERE name = 'api' FOR UPDATE")
            for n in (1, 2):  # as many as the pool holds, each waiting for the row lock
                stuck.append(threading.Thread(target=_ask_for_a_permit, args=(app, n)))
                stuck[-1].start()
            assert wait_until(lambda: store._pool.in_use == 2, 30)
            full_at = lease_of(locker)[0]
            renewed = wait_until(lambda: lease_of(locker)[0] > full_at, 30)
            assert store._pool.in_use == 2  # still held: the renewal did not need it
        finally:
            locker.rollback()
            release.set()
            for thread in [*stuck, runner]:
                thread.join(30)
            app.close()
    assert renewed, "the lease was not renewed while every pooled connection was held"
    assert results == ["done"]


def test_a_claim_not_yet_committed_elsewhere_keeps_a_batch_run_waiting(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process's claim of the batch's last task, its transaction not yet
    committed, hides that task from this claimer twice over: ``SKIP LOCKED``
    passes it, and it is not yet running under another owner. The claimer must
    wait rather than end the run as if nothing were left; once the other
    transaction is gone, it claims the task."""
    with Cairn(pg_url, clock=FakeClock()) as app:

        @app.task(name="race")
        def race(ctx: Context, n: int) -> int:
            return n

        app.enqueue("race", race, [{"n": 1}])
        engine = app.engine()
        real_claim = engine.store.claim_next_pending
        with psycopg.connect(pg_url) as other:  # a transaction, held open until rollback

            def claimed_elsewhere_first(*args: Any, **kwargs: Any) -> Any:
                other.execute("SELECT id FROM cairn.tasks WHERE batch = 'race' FOR UPDATE")
                return real_claim(*args, **kwargs)

            monkeypatch.setattr(engine.store, "claim_next_pending", claimed_elsewhere_first)
            assert Claimer(engine, "race").next() == WAIT
            other.rollback()
            monkeypatch.setattr(engine.store, "claim_next_pending", real_claim)
        taken = Claimer(engine, "race").next()
        assert taken is not None
        assert taken != WAIT
        assert taken.owner == app.owner


def _ask_for_a_permit(app: Cairn, n: int) -> None:
    now = app.clock.now()
    app.store.acquire_permit("api", 9, timedelta(0), f"p{n}", "o", "t", now, now)


def logged_lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    """The messages logged so far that contain ``text``."""
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def test_an_unreachable_server_is_reported_within_the_connect_timeout() -> None:
    """Nothing listening at the URL's host and port: a StoreError, within about the
    connect timeout, that names the host and port and asks whether the server is
    running."""
    started = time.monotonic()
    with pytest.raises(StoreError) as refused:
        PostgresStore(UNREACHABLE, connect_timeout=1)
    assert time.monotonic() - started < 3
    message = str(refused.value)
    assert "127.0.0.1:1" in message
    assert "server running" in message


# -- passwords stay secret ---------------------------------------------------------------


def messages_of(error: BaseException) -> str:
    """The error's message and those of every error it was raised from."""
    parts: list[str] = []
    seen: BaseException | None = error
    while seen is not None:
        parts.append(f"{type(seen).__name__}: {seen}")
        seen = seen.__cause__ or seen.__context__
    return "\n".join(parts)


def test_the_password_of_an_unreachable_server_is_not_shown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The error for a server that cannot be reached, the errors it came from and
    every log line show the URL with its password masked."""
    with caplog.at_level(logging.DEBUG), pytest.raises(StoreError) as refused:
        PostgresStore(with_password(UNREACHABLE, PASSWORD), connect_timeout=1)
    assert PASSWORD not in messages_of(refused.value)
    assert ":***@127.0.0.1:1" in str(refused.value)
    assert all(PASSWORD not in record.getMessage() for record in caplog.records)


def test_the_password_is_not_shown_when_the_schema_is_too_new(pg_url: str) -> None:
    """SchemaTooNew names the database by its URL with the password masked."""
    sql(pg_url, "UPDATE cairn.cairn_meta SET value = '999' WHERE key = 'schema_version'")
    with pytest.raises(SchemaTooNew) as refused:
        PostgresStore(with_password(pg_url, PASSWORD))
    assert PASSWORD not in messages_of(refused.value)
    assert ":***@" in str(refused.value)


def test_a_server_gone_past_reconnect_timeout_gives_a_store_error_without_password(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """When the database stays unreachable for longer than ``reconnect_timeout``, a
    store call stops retrying with a StoreError saying the connection was lost, its
    URL's password masked, instead of waiting for ever."""
    url = with_params(with_password(pg_url, PASSWORD), reconnect_timeout="1")
    database = urlsplit(pg_url).path.lstrip("/")
    store = PostgresStore(url)
    outcome: list[BaseException | None] = []

    def call() -> None:
        try:
            store.get_task("none")
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertions below
            outcome.append(exc)

    caller = threading.Thread(target=call, daemon=True)
    sql(postgres_admin_url(), f"ALTER DATABASE {database} ALLOW_CONNECTIONS false")
    try:
        terminate_connections(pg_url)
        with caplog.at_level(logging.WARNING):
            caller.start()
            caller.join(timeout=6)
            gave_up = not caller.is_alive()
    finally:
        store.close()  # a caller still retrying gets a StoreError and ends
        caller.join(timeout=10)
        sql(postgres_admin_url(), f"ALTER DATABASE {database} ALLOW_CONNECTIONS true")
    assert gave_up, "the store kept retrying for 6 s with reconnect_timeout=1"
    assert isinstance(outcome[0], StoreUnavailable), outcome
    assert "lost PostgreSQL" in str(outcome[0])
    assert "for more than 1s" in str(outcome[0])
    assert PASSWORD not in messages_of(outcome[0])
    assert all(PASSWORD not in record.getMessage() for record in caplog.records)


# -- a real restart, on a private cluster (tests/pgcluster.py) --------------------------------
class OpenSpy:
    """Counts each thread's failed attempts to open a connection, by wrapping the
    pool's ``connect``."""

    def __init__(self, store: PostgresStore) -> None:
        self._connect = store._pool.connect
        self._lock = threading.Lock()
        self.failed: Counter[int] = Counter()
        store._pool.connect = self  # type: ignore[method-assign]

    def __call__(self, *, watched: bool = True, **overrides: Any) -> WatchedConnection:
        try:
            return self._connect(watched=watched, **overrides)
        except psycopg.OperationalError:
            with self._lock:
                self.failed[threading.get_ident()] += 1
            raise

    def threads_refused(self) -> int:
        with self._lock:
            return len(self.failed)


def fill_pool(store: PostgresStore, count: int) -> None:
    """Leave ``count`` open connections idle in the store's pool."""
    barrier = threading.Barrier(count)
    threads = [
        threading.Thread(target=store._pool.run, args=(lambda conn: barrier.wait(10),))
        for _ in range(count)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store._pool.idle == count


def test_after_a_real_restart_every_waiting_thread_writes_again_promptly(
    pg_cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """A private cluster is stopped (a fast shutdown, as in a restart) under a
    store with four idle pooled connections, and four threads try to write.

    The first meets a dead pooled connection ("PostgreSQL connection lost"); it
    is discarded with every idle one, so the other three go straight to opening
    new connections and none meets a dead one: one lost connection is logged,
    not four. All four wait with cairn's backoff, capped at 0.5 s, and once the
    server accepts connections again every write lands; the pool logs that it
    reconnected. The time from the server's first accepted connection to each
    write is measured and printed (not asserted: this machine's speed varies)."""
    url = pg_cluster.create_database("cairn")
    store = PostgresStore(url)
    done: dict[int, float] = {}
    failed: list[BaseException] = []

    def write(n: int) -> None:
        try:
            store.ensure_batch(f"b{n}", "t", FakeClock().now())
            done[n] = time.monotonic()
        except BaseException as exc:  # noqa: BLE001 - reported by the assertions below
            failed.append(exc)

    writers = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    try:
        fill_pool(store, 4)
        spy = OpenSpy(store)
        with caplog.at_level(logging.WARNING, logger="cairn"):
            pg_cluster.stop()
            writers[0].start()
            assert wait_until(lambda: spy.threads_refused() == 1, 60)
            for writer in writers[1:]:
                writer.start()
            assert wait_until(lambda: spy.threads_refused() == 4, 60)
            starting = threading.Thread(target=pg_cluster.start)
            starting.start()
            accepted = pg_cluster.wait_accepting()
            for writer in writers:
                writer.join(timeout=60)
            starting.join(timeout=60)
    finally:
        store.close()
    assert failed == []
    assert sorted(done) == [0, 1, 2, 3]
    assert sql(url, "SELECT name FROM cairn.batches ORDER BY name") == [
        ("b0",),
        ("b1",),
        ("b2",),
        ("b3",),
    ]
    assert len(logged_lines(caplog, "PostgreSQL connection lost")) == 1
    assert logged_lines(caplog, "reconnected to PostgreSQL")
    assert not logged_lines(caplog, "connections are in use")
    after = sorted(done[n] - accepted for n in done)
    print(
        "\nserver accepting -> writes landed: "
        + ", ".join(f"{delay * 1000:+.0f} ms" for delay in after)
        + f" (failed opens per thread: {sorted(spy.failed.values())})"
    )


def test_an_impatient_statement_gives_up_at_once_while_the_server_is_down(
    pg_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_exec(..., patient=False)``, as the lease heartbeat calls it: with the
    private cluster stopped, the stale pooled connection is discarded, the first
    failed attempt to open a new one raises StoreUnavailable, and the pool never
    waited to try again. Once the server is back the same call succeeds."""
    store = PostgresStore(pg_cluster.create_database("cairn"))
    waits: list[float] = []
    server_down = pgpool.ConnectionPool._server_down

    def record(pool: pgpool.ConnectionPool, cause: BaseException, delay: float) -> None:
        waits.append(delay)
        server_down(pool, cause, delay)

    monkeypatch.setattr(pgpool.ConnectionPool, "_server_down", record)
    try:
        assert store._exec("SELECT 1", patient=False).rows == [(1,)]
        pg_cluster.stop()
        with pytest.raises(StoreUnavailable) as gave_up:
            store._exec("SELECT 1", patient=False)
        assert waits == []
        assert store._pool.idle == 0
        pg_cluster.start()
        assert store._exec("SELECT 1", patient=False).rows == [(1,)]
    finally:
        store.close()
    assert f"lost PostgreSQL at {pg_cluster.url('cairn')}" in str(gave_up.value)


# -- statements the server refuses: raised at once, never retried ------------------------------
# 10,000 characters that do not compress, so PostgreSQL cannot fit them in an index row.
LONG = "".join(hashlib.sha256(str(n).encode()).hexdigest() for n in range(157))[:10_000]


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("a 10,000-character task id", "PostgreSQL refused a write to tasks: index row"),
        ("a 10,000-character batch name", "PostgreSQL refused a write to batches: index row"),
        ("a NUL in a task id", "PostgreSQL refused a write to tasks: PostgreSQL text fields"),
    ],
)
def test_a_value_postgres_cannot_store_is_refused_at_once_and_nothing_is_written(
    pg_url: str, case: str, expected: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A task id or batch name of 10,000 characters (too long for a PostgreSQL
    index row) or a task id holding a NUL (which PostgreSQL text cannot hold),
    handed to the store itself, is refused by the server or the driver. The
    store raises a StoreError at once, chained from the driver's error, that says
    what was refused and what to do; it does not treat it as a lost connection
    (no retry, nothing logged), and the store holds no task and no batch
    afterwards. (This is the store's own guard: the app also checks names before
    they reach any store.)"""
    now = FakeClock().now()
    tasks = {
        "a 10,000-character task id": NewTask(LONG, "work", "{}", "json"),
        "a 10,000-character batch name": NewTask("t", "work", "{}", "json", batch=LONG),
        "a NUL in a task id": NewTask("bad\x00id", "work", "{}", "json"),
    }
    store = PostgresStore(pg_url)
    try:
        with caplog.at_level(logging.WARNING, logger="cairn"), pytest.raises(StoreError) as refused:
            store.enqueue([tasks[case]], now)
    finally:
        store.close()
    message = str(refused.value)
    assert message.startswith(expected), message
    assert ("too long" in message) or ("NUL" in message)
    assert "Nothing was written by this statement" in message
    assert isinstance(refused.value.__cause__, psycopg.Error)
    assert not isinstance(refused.value, StoreUnavailable)
    assert caplog.records == []
    assert sql(pg_url, "SELECT count(*) FROM cairn.tasks") == [(0,)]
    assert sql(pg_url, "SELECT count(*) FROM cairn.batches") == [(0,)]


def test_a_read_only_database_is_refused_with_store_read_only(pg_url: str) -> None:
    """On a database whose sessions are read-only (``default_transaction_read_only``,
    as on a standby), opening the store works (it only reads), reading works, and
    the first write raises StoreReadOnly at once, saying to use the primary."""
    database = urlsplit(pg_url).path.lstrip("/")
    sql(postgres_admin_url(), f"ALTER DATABASE {database} SET default_transaction_read_only = on")
    runs: Counter[str] = Counter()
    with Cairn(pg_url, clock=FakeClock()) as app:
        assert app.store.get_task("none") is None
        with pytest.raises(StoreReadOnly) as refused:
            app.run(one_step_task(app, runs), task_id="t", n=1)
    assert "is read-only" in str(refused.value)
    assert "primary" in str(refused.value)
    assert runs == Counter()
