"""cairn's PostgreSQL connection pool, with fake connections: what it retries,
how it backs off, when it gives up, and what it says while a thread waits.

No server is needed: the pool's ``connect`` is replaced by a fake that fails or
hands out ``FakeConn`` objects as each test scripts it. The same pool against a
real server, restarted, is in tests/integration/test_postgres_store.py.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from psycopg import errors, pq

from cairn.errors import StoreError, StoreUnavailable
from cairn.store import pgpool
from cairn.store.pgpool import ConnectionPool, connection_lost

REFUSED = "connection failed: connection to server at 127.0.0.1, port 1 failed: refused"


@dataclass
class FakeInfo:
    transaction_status: pq.TransactionStatus = pq.TransactionStatus.IDLE


@dataclass
class FakeConn:
    """Enough of a psycopg connection for the pool: open, broken, closed."""

    number: int
    closed: bool = False
    broken: bool = False
    info: FakeInfo = field(default_factory=FakeInfo)

    def close(self) -> None:
        self.closed = True


class Server:
    """The fake server behind a pool: ``down`` refuses new connections."""

    def __init__(self) -> None:
        self.down = False
        self.opened: list[FakeConn] = []
        self.refusals = 0
        self.lock = threading.Lock()

    def connect(self, **_: Any) -> FakeConn:
        with self.lock:
            if self.down:
                self.refusals += 1
                raise psycopg.OperationalError(REFUSED)
            conn = FakeConn(len(self.opened) + 1)
            self.opened.append(conn)
            return conn


def number(conn: Any) -> int:
    """Work that answers which connection it ran on."""
    return int(conn.number)


@pytest.fixture
def server() -> Server:
    return Server()


def make_pool(server: Server, monkeypatch: pytest.MonkeyPatch, *, size: int = 4) -> ConnectionPool:
    pool = ConnectionPool(
        "postgresql://postgres@127.0.0.1:1/cairn",
        size=size,
        options="-c search_path=cairn",
        where="postgresql://postgres@127.0.0.1:1/cairn",
        reconnect_timeout=300,
        connect_timeout=10,
    )
    monkeypatch.setattr(pool, "connect", server.connect)
    return pool


def lost() -> psycopg.Error:
    """What a statement on a connection the server ended raises."""
    return errors.lookup("57P01")("terminating connection due to administrator command")


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The backoff waits the pool asks for, recorded instead of slept."""
    asked: list[float] = []
    monkeypatch.setattr(
        ConnectionPool, "_server_down", lambda self, cause, delay: asked.append(delay)
    )
    return asked


# -- which errors are connection-level ----------------------------------------------------
@pytest.mark.parametrize(
    ("sqlstate", "lost_connection"),
    [
        ("08006", True),  # connection_failure
        ("08003", True),  # connection_does_not_exist
        ("57P01", True),  # admin_shutdown: a fast stop or a restart
        ("57P02", True),  # crash_shutdown
        ("57P03", True),  # cannot_connect_now: still starting up
        ("54000", False),  # program_limit_exceeded: an index row too large
        ("22021", False),  # character_not_in_repertoire
        ("42501", False),  # insufficient_privilege
        ("25006", False),  # read_only_sql_transaction
        ("23505", False),  # unique_violation
        ("57014", False),  # query_canceled: statement_timeout
        ("40P01", False),  # deadlock_detected
    ],
)
def test_only_connection_level_server_errors_count_as_a_lost_connection(
    sqlstate: str, lost_connection: bool
) -> None:
    """SQLSTATE class 08 and 57P01-57P03 mean the connection is gone; every other
    server error is an answer that retrying would only repeat."""
    error = errors.lookup(sqlstate)("message")
    assert connection_lost(error, FakeConn(1)) is lost_connection  # type: ignore[arg-type]


def test_a_client_error_counts_as_lost_only_if_it_broke_the_connection() -> None:
    """An error with no SQLSTATE was raised by the client: it is a lost connection
    when the connection is broken (or closed) after it, and not otherwise (a NUL
    in a text parameter leaves the connection fine). Other exceptions never are."""
    intact, broken = FakeConn(1), FakeConn(2, broken=True)
    nul = psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes")
    assert not connection_lost(nul, intact)  # type: ignore[arg-type]
    assert connection_lost(psycopg.OperationalError("server closed the connection"), broken)  # type: ignore[arg-type]
    assert not connection_lost(ValueError("x"), broken)  # type: ignore[arg-type]


# -- retrying and backing off --------------------------------------------------------------
def test_reconnecting_backs_off_from_50ms_doubling_to_a_half_second_cap(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the server refuses connections, the pool waits 0.05 s, 0.1, 0.2, 0.4,
    then 0.5 s between tries, never longer; the call succeeds on the first try
    after the server is back, on a new connection."""
    pool = make_pool(server, monkeypatch)
    server.down = True
    waits: list[float] = []

    def server_down(self: ConnectionPool, cause: BaseException, delay: float) -> None:
        waits.append(delay)
        server.down = len(waits) < 8  # back after the 8th refusal

    monkeypatch.setattr(ConnectionPool, "_server_down", server_down)
    assert pool.run(number) == 1
    assert waits == [0.05, 0.1, 0.2, 0.4, 0.5, 0.5, 0.5, 0.5]
    assert server.refusals == 8
    assert (pool.in_use, pool.idle) == (0, 1)


def test_a_lost_connection_is_replaced_and_every_idle_one_discarded(
    server: Server, monkeypatch: pytest.MonkeyPatch, waits: list[float]
) -> None:
    """After a restart every pooled connection is dead: the first statement to
    meet one closes it and all idle ones, and runs again at once (no wait) on a
    new connection. The statement runs twice: work given to the pool must be
    idempotent."""
    pool = make_pool(server, monkeypatch)
    barrier = threading.Barrier(3)
    threads = [threading.Thread(target=pool.run, args=(lambda c: barrier.wait(),)) for _ in "ab"]
    for thread in threads:
        thread.start()
    barrier.wait()
    for thread in threads:
        thread.join()
    assert pool.idle == 2
    first_two = list(server.opened)
    calls: list[int] = []

    def work(conn: FakeConn) -> str:
        calls.append(conn.number)
        if conn in first_two:
            conn.broken = True
            raise lost()
        return "written"

    assert pool.run(work) == "written"  # type: ignore[arg-type]
    assert len(calls) == 2  # one stale connection met, then a new one
    assert calls[1] == 3
    assert all(conn.closed for conn in first_two)
    assert waits == []
    assert (pool.in_use, pool.idle) == (0, 1)


@pytest.mark.parametrize("sqlstate", ["40P01", "40001"])
def test_a_deadlock_or_serialization_failure_runs_again_a_few_times_then_is_raised(
    server: Server, monkeypatch: pytest.MonkeyPatch, sqlstate: str
) -> None:
    """A deadlock or serialization failure was rolled back whole by the server, so
    the work runs again at once on the same connection, up to three more times;
    a fourth conflict is raised."""
    pool = make_pool(server, monkeypatch)
    calls: list[int] = []

    def conflicted_twice(conn: FakeConn) -> str:
        calls.append(conn.number)
        if len(calls) <= 2:
            raise errors.lookup(sqlstate)("deadlock detected")
        return "written"

    assert pool.run(conflicted_twice) == "written"  # type: ignore[arg-type]
    assert calls == [1, 1, 1]

    def always(conn: FakeConn) -> str:
        calls.append(conn.number)
        raise errors.lookup(sqlstate)("deadlock detected")

    calls.clear()
    with pytest.raises(psycopg.Error):
        pool.run(always)  # type: ignore[arg-type]
    assert len(calls) == 1 + pgpool.CONFLICT_RETRIES
    assert (pool.in_use, pool.idle) == (0, 1)


def test_an_error_that_is_not_a_lost_connection_is_raised_at_once_and_keeps_the_connection(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``index row size exceeds btree maximum`` (54000) is raised to the caller on
    the first try, untouched; the connection, still good, goes back to the pool."""
    pool = make_pool(server, monkeypatch)
    calls: list[int] = []

    def too_long(conn: FakeConn) -> None:
        calls.append(conn.number)
        raise errors.lookup("54000")("index row size 10016 exceeds btree maximum 2704")

    with pytest.raises(errors.ProgramLimitExceeded):
        pool.run(too_long)  # type: ignore[arg-type]
    assert calls == [1]
    assert (pool.in_use, pool.idle) == (0, 1)
    assert not server.opened[0].closed


def test_a_connection_left_inside_a_transaction_is_not_reused(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection given back mid-transaction (work interrupted by an exception
    of its own) is closed rather than lent to the next thread."""
    pool = make_pool(server, monkeypatch)

    def interrupted(conn: FakeConn) -> None:
        conn.info.transaction_status = pq.TransactionStatus.INTRANS
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pool.run(interrupted)  # type: ignore[arg-type]
    assert server.opened[0].closed
    assert (pool.in_use, pool.idle) == (0, 0)


def test_impatient_run_replaces_stale_connections_but_gives_up_at_the_first_failed_open(
    server: Server, monkeypatch: pytest.MonkeyPatch, waits: list[float]
) -> None:
    """``patient=False`` (the lease heartbeat): a dead pooled connection is
    discarded and a new one tried, but when that cannot be opened the call raises
    StoreUnavailable at once, without a single backoff wait."""
    pool = make_pool(server, monkeypatch)
    pool.run(lambda conn: None)
    stale = server.opened[0]
    stale.broken = True
    server.down = True

    def work(conn: FakeConn) -> None:
        raise lost()

    with pytest.raises(StoreUnavailable) as gave_up:
        pool.run(work, patient=False)  # type: ignore[arg-type]
    assert "lost PostgreSQL at postgresql://postgres@127.0.0.1:1/cairn" in str(gave_up.value)
    assert "refused" in str(gave_up.value)
    assert waits == []
    assert server.refusals == 1
    assert stale.closed
    assert (pool.in_use, pool.idle) == (0, 0)


def test_past_the_reconnect_timeout_a_call_raises_store_unavailable(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call that has been failing to reconnect for longer than
    ``reconnect_timeout`` raises StoreUnavailable: "lost PostgreSQL at URL for
    more than Ns", with the driver's reason. (The clock the pool reads is moved
    on by a second per try.)"""
    pool = make_pool(server, monkeypatch)
    pool.reconnect_timeout = 3
    server.down = True
    now = [1000.0]
    monkeypatch.setattr(pgpool, "monotonic", lambda: now[0])
    monkeypatch.setattr(
        ConnectionPool, "_server_down", lambda self, cause, delay: now.__setitem__(0, now[0] + 1)
    )
    with pytest.raises(StoreUnavailable) as gave_up:
        pool.run(lambda conn: None)
    assert str(gave_up.value).startswith(
        "lost PostgreSQL at postgresql://postgres@127.0.0.1:1/cairn for more than 3s: "
    )
    assert server.refusals == 5  # at 0, 1, 2, 3 s, and at 4 s it gave up


def test_a_closed_pool_refuses_work(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """After close, the idle connections are closed and a call raises StoreError."""
    pool = make_pool(server, monkeypatch)
    pool.run(lambda conn: None)
    pool.close()
    assert server.opened[0].closed
    with pytest.raises(StoreError, match="is closed"):
        pool.run(lambda conn: None)


# -- what a waiting thread says --------------------------------------------------------------
def hold(pool: ConnectionPool, count: int) -> tuple[threading.Event, list[threading.Thread]]:
    """``count`` threads that each hold one connection until the event is set."""
    release = threading.Event()
    holding = threading.Barrier(count + 1)

    def holder(conn: Any) -> None:
        holding.wait()
        release.wait()

    threads = [threading.Thread(target=pool.run, args=(holder,)) for _ in range(count)]
    for thread in threads:
        thread.start()
    holding.wait()
    return release, threads


def wait_for_log(caplog: pytest.LogCaptureFixture, text: str) -> Callable[[], bool]:
    return lambda: any(text in record.getMessage() for record in caplog.records)


def test_a_full_pool_says_all_connections_are_in_use_only_when_they_are(
    server: Server, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Both connections of a pool of 2 checked out: a third caller, after waiting
    (``POOL_WAIT``, shortened here), logs "all 2 PostgreSQL connections are in
    use" and gets a connection as soon as one is given back."""
    monkeypatch.setattr(pgpool, "POOL_WAIT", 0.05)
    pool = make_pool(server, monkeypatch, size=2)
    release, holders = hold(pool, 2)
    assert pool.in_use == 2
    got: list[int] = []
    with caplog.at_level(logging.WARNING, logger="cairn"):
        caller = threading.Thread(target=lambda: got.append(pool.run(number)))
        caller.start()
        logged = _poll(wait_for_log(caplog, "all 2 PostgreSQL connections are in use"))
        release.set()
        for thread in [*holders, caller]:
            thread.join()
    assert logged
    assert got in ([1], [2])
    assert len(server.opened) == 2  # the caller got a given-back one, not a third


def test_a_pool_waiting_on_slow_opens_does_not_claim_all_connections_are_in_use(
    server: Server, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """One connection checked out and the other slot busy opening a connection
    that hangs: a waiting caller says how many are in use and being opened, and
    never that all are in use."""
    monkeypatch.setattr(pgpool, "POOL_WAIT", 0.05)
    pool = make_pool(server, monkeypatch, size=2)
    release, holders = hold(pool, 1)
    opening, unblock = threading.Event(), threading.Event()

    def slow_connect(**_: Any) -> FakeConn:
        opening.set()
        unblock.wait()
        return server.connect()

    monkeypatch.setattr(pool, "connect", slow_connect)
    with caplog.at_level(logging.WARNING, logger="cairn"):
        opener = threading.Thread(target=pool.run, args=(lambda c: None,))
        opener.start()
        assert opening.wait(10)
        caller = threading.Thread(target=pool.run, args=(lambda c: None,))
        caller.start()
        logged = _poll(wait_for_log(caplog, "1 of 2 in use, 1 being opened"))
        unblock.set()
        release.set()
        for thread in [*holders, opener, caller]:
            thread.join()
    assert logged
    assert not wait_for_log(caplog, "connections are in use")()


def _poll(predicate: Callable[[], bool], timeout: float = 30) -> bool:
    done = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if predicate():
            return True
        done.wait(0.01)  # real-sleep-ok: waiting for the pool's own thread to log
    return False


def test_impatient_run_gives_up_when_a_new_connection_is_lost_at_once(
    server: Server, monkeypatch: pytest.MonkeyPatch, waits: list[float]
) -> None:
    """A server that accepts a connection and drops it straight away (still
    shutting down, or flapping) is, for ``patient=False``, as good as down: the
    call raises StoreUnavailable instead of waiting to try again."""
    pool = make_pool(server, monkeypatch)

    def work(conn: FakeConn) -> None:
        conn.broken = True
        raise lost()

    with pytest.raises(StoreUnavailable):
        pool.run(work, patient=False)  # type: ignore[arg-type]
    assert len(server.opened) == 1
    assert waits == []
    assert (pool.in_use, pool.idle) == (0, 0)
