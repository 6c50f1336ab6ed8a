"""A PostgreSQL connection that goes silent is abandoned, never waited on forever.

A proxy (``tests/pgproxy.py``) between the store and the test's database stops
forwarding while its sockets stay open, so the client's TCP stack sees nothing
wrong: only cairn's own watchdog (``cairn.store.pgwatch``) can tell. The
shared server is never stopped. The round-trip bound is 1 s here (the floor),
so each test takes a few seconds; the bound an app uses is a third of its lease.

* A statement on a connection that went half-open (new connections still
  work) is abandoned once the server, asked on a new connection, says that
  connection's process is not running it; the pool runs it again on a new
  connection, and it lands once.
* With new connections black-holed too, the server cannot be asked: the
  connection is abandoned all the same, and past ``reconnect_timeout`` the
  call raises ``StoreUnavailable``.
* Silence is not enough: a statement that waits for a row lock, or runs long,
  is looked at and left to finish.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
import pytest

from cairn.clock import FakeClock
from cairn.errors import StoreUnavailable
from cairn.store.pgwatch import SILENCE_FLOOR
from cairn.store.postgres import PostgresStore
from cairn.store.records import NewTask
from tests.pgproxy import LosingProxy
from tests.servers import wait_until

# Generous: a call that is abandoned returns within a few seconds, one that is
# not never returns (main before the watchdog).
RETURN_TIMEOUT = 60.0


def with_params(url: str, **params: str) -> str:
    parts = urlsplit(url)
    query = urlencode([*parse_qsl(parts.query), *params.items()])
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


@pytest.fixture
def proxy(pg_url: str) -> Iterator[LosingProxy]:
    with LosingProxy(pg_url) as running:
        yield running


def opened(url: str) -> PostgresStore:
    """A store whose waits are bounded at the floor (1 s), warmed: its pool holds
    one open connection."""
    store = PostgresStore(url)
    store.bound_round_trips(SILENCE_FLOOR)
    store.ensure_batch("warm", "t", FakeClock().now())
    return store


def in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Run ``call`` in a thread; its result (or error) lands in the list."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def test_a_statement_on_a_half_open_connection_runs_again_on_a_new_one(
    proxy: LosingProxy, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Every open connection goes half-open (the proxy forwards nothing on it,
    and keeps it open), new ones work: a write on the old one is abandoned once
    the server, asked on a new one, says its process is idle; the pool writes
    again on a new connection, and the task is there once."""
    store = opened(proxy.url)
    caplog.set_level(logging.WARNING, logger="cairn")
    try:
        proxy.black_hole(new_connections=False)
        task = NewTask("t/1", "t", "{}", "json")
        thread, outcome = in_thread(lambda: store.create_task(task, FakeClock().now()))
        thread.join(RETURN_TIMEOUT)
        assert outcome == [True], "the write never returned, or failed"
        assert store._watchdog.abandoned == 1
        assert store.get_task("t/1") is not None
    finally:
        store.close()
    said = [r.getMessage() for r in caplog.records if "no answer from PostgreSQL" in r.getMessage()]
    assert len(said) == 1, said
    assert "its server process is idle" in said[0]
    assert "PostgreSQL connection lost" not in caplog.text  # said once, by the watchdog


def test_with_the_server_unreachable_the_call_gives_up_after_the_reconnect_timeout(
    proxy: LosingProxy, caplog: pytest.LogCaptureFixture
) -> None:
    """Old and new connections black-holed: the silent connection is abandoned
    although the server cannot be asked, new ones cannot be opened (their
    connect_timeout), and past reconnect_timeout the call raises
    StoreUnavailable instead of waiting for the hole to close."""
    store = opened(with_params(proxy.url, reconnect_timeout="2"))
    caplog.set_level(logging.WARNING, logger="cairn")
    try:
        proxy.black_hole()
        thread, outcome = in_thread(lambda: store.get_task("t/1"))
        thread.join(RETURN_TIMEOUT)
        proxy.heal()
        assert len(outcome) == 1, "the call never returned"
        assert isinstance(outcome[0], StoreUnavailable), outcome
        assert "lost PostgreSQL" in str(outcome[0])
        assert store._watchdog.abandoned == 1
    finally:
        store.close()
    assert "the server could not be reached to ask why" in caplog.text


def test_a_statement_waiting_for_a_lock_is_left_to_finish(proxy: LosingProxy, pg_url: str) -> None:
    """A cancel waits for a row lock another session holds for several times the
    bound: the watchdog looks (the server says the process is waiting for a
    lock) and leaves it; once the lock goes, the cancel lands, and no
    connection was abandoned."""
    store = opened(proxy.url)
    clock = FakeClock()
    try:
        store.create_task(NewTask("t/1", "t", "{}", "json"), clock.now())
        with psycopg.connect(pg_url, autocommit=True) as holder:
            with holder.transaction():
                holder.execute("SELECT 1 FROM cairn.tasks WHERE id = 't/1' FOR UPDATE")
                thread, outcome = in_thread(lambda: store.cancel_task("t/1", clock.now()))
                assert wait_until(lambda: store._watchdog.looks >= 2, RETURN_TIMEOUT)
                assert outcome == []
            thread.join(RETURN_TIMEOUT)
        assert outcome == [True]
        assert store._watchdog.abandoned == 0
    finally:
        store.close()


def test_a_long_statement_is_left_to_finish(proxy: LosingProxy) -> None:
    """A statement that runs 2.5 s (2.5 times the bound) is looked at while it
    runs and returns its answer; nothing is abandoned."""
    store = opened(proxy.url)
    try:
        slept = store._pool.run(lambda conn: conn.execute("SELECT pg_sleep(2.5)").rowcount)
        assert slept == 1
        assert store._watchdog.looks >= 1
        assert store._watchdog.abandoned == 0
    finally:
        store.close()


def test_connections_open_with_keepalives_and_timeouts_unless_the_url_sets_them(
    pg_url: str,
) -> None:
    """A store's connections carry TCP keepalives, tcp_user_timeout and a
    connect_timeout bounded by the round-trip bound (10 s by default: a third of
    the default lease); a value the URL gives is kept."""
    store = PostgresStore(with_params(pg_url, keepalives_idle="42"))
    try:
        conn = store._pool.connect()
        try:
            given = conn.info.get_parameters()
        finally:
            conn.close()
    finally:
        store.close()
    assert given["keepalives_idle"] == "42"
    assert given["tcp_user_timeout"] == "10000"
    assert given["keepalives"] == "1"
