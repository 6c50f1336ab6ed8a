"""cairn's own pool of PostgreSQL connections: cairn owns reconnecting end to end.

A lease is only as good as the heartbeat that renews it, so after an outage every
thread must be writing again within about a second of the server accepting
connections. A general-purpose pool has its own reconnect backoff, which can
keep a live worker silent long enough for its leases to lapse. This
one does only what the store needs:

* Connections are opened on demand, up to ``size``, in autocommit mode and with
  the given ``options``. A thread borrows one for one statement or one
  transaction and gives it back; the pool knows exactly how many are out.
* A connection that fails at the connection level (``connection_lost``) is
  closed, and so is every idle one: after a server restart they are all dead,
  and finding that out one statement at a time would cost a failure each.
* Opening a connection that fails is tried again after 0.05 s, then twice as
  long each time up to 0.5 s; and the moment any thread gets a connection, every
  thread waiting to try again tries at once. Past ``reconnect_timeout`` seconds
  of failing, the call raises ``StoreUnavailable``.
* Only connection-level failures are retried. Any other error goes straight to
  the caller, which says what was refused.
* Every connection opens with TCP keepalives, ``tcp_user_timeout`` and a
  ``connect_timeout`` bounded by the store's round-trip bound, unless the URL
  sets them (``pgwatch.connection_settings``), and every wait on it is watched
  (``pgwatch.Watchdog``): one that stays silent while the server is not
  working on it is cut, and is then a lost connection like any other.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from time import monotonic
from typing import Any, TypeVar

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict

from cairn.store.driver_errors import one_line, postgres_closed, postgres_lost
from cairn.store.pgwatch import DEFAULT_ROUND_TRIP, Watchdog, WatchedConnection, connection_settings

log = logging.getLogger("cairn")
T = TypeVar("T")

FIRST_DELAY = 0.05
MAX_DELAY = 0.5
# A thread that has waited this long for a connection says why, and again after
# each further wait as long.
POOL_WAIT = 5.0
# While the server cannot be reached, one line this often (not one per thread per try).
LOG_EVERY = 5.0
# Server errors that mean "this connection is gone": the server shut down
# (57P01 admin_shutdown, 57P02 crash_shutdown) or is not accepting connections
# yet (57P03 cannot_connect_now). Class 08 is every connection exception.
_SERVER_GONE = frozenset({"57P01", "57P02", "57P03"})


def connection_lost(exc: BaseException, conn: psycopg.Connection[Any] | None) -> bool:
    """Did ``exc`` happen because the connection (or the server) went away?

    True for SQLSTATE class 08 and 57P01-57P03, and for an error without a
    SQLSTATE (raised by the client, not the server) that left its connection
    broken. Everything else (a value too long for an index, a NUL in text, a
    missing privilege, a read-only server, a cancelled statement) is an answer
    from a working server, and retrying it would only get the same answer."""
    if not isinstance(exc, psycopg.Error):
        return False
    state = exc.sqlstate
    if state is not None:
        return state.startswith("08") or state in _SERVER_GONE
    return conn is not None and (conn.broken or conn.closed)


# A deadlock (40P01) or serialization failure (40001): the server rolled the
# transaction back whole, so running it again is safe; it is, a few times.
_CONFLICTS = frozenset({"40P01", "40001"})
CONFLICT_RETRIES = 3


def rolled_back_conflict(exc: BaseException) -> bool:
    """True for a deadlock or serialization failure the server rolled back."""
    return isinstance(exc, psycopg.Error) and exc.sqlstate in _CONFLICTS


class _ConnectFailed(Exception):
    """Opening a new connection failed; ``cause`` is the driver's error."""

    def __init__(self, cause: psycopg.OperationalError) -> None:
        super().__init__(one_line(cause))
        self.cause = cause


class ConnectionPool:
    """At most ``size`` autocommit connections to ``conninfo``, opened on demand.

    ``where`` names the server in messages (the URL, its password masked)."""

    def __init__(
        self,
        conninfo: str,
        *,
        size: int,
        options: str,
        where: str,
        reconnect_timeout: float,
        connect_timeout: float | None = None,
        watchdog: Watchdog | None = None,
    ) -> None:
        if size < 1:
            raise ValueError(f"pool_size must be at least 1, not {size}")
        self.size = size
        self.where = where
        self.reconnect_timeout = reconnect_timeout
        self.watchdog = watchdog
        self._conninfo = conninfo
        self._given = conninfo_to_dict(conninfo)
        self._kwargs: dict[str, Any] = {"autocommit": True, "options": options}
        if connect_timeout is not None and "connect_timeout" not in self._given:
            self._kwargs["connect_timeout"] = max(1, round(connect_timeout))
        self._lock = threading.Lock()
        # Notified when a connection comes back or a slot frees up.
        self._freed = threading.Condition(self._lock)
        # Notified when a new connection opened: the server is back, try now.
        self._opened = threading.Condition(self._lock)
        self._idle: list[psycopg.Connection[Any]] = []
        self._out = 0  # checked out by a thread right now
        self._opening = 0  # being opened by a thread right now
        self._closed = False
        self._down_since: float | None = None  # the first failed open of this outage
        self._last_warning = 0.0

    # -- what callers and tests read -------------------------------------------------
    @property
    def in_use(self) -> int:
        """Connections checked out right now."""
        with self._lock:
            return self._out

    @property
    def idle(self) -> int:
        """Open connections waiting in the pool."""
        with self._lock:
            return len(self._idle)

    # -- opening and closing ---------------------------------------------------------
    def connect(self, *, watched: bool = True, **overrides: Any) -> WatchedConnection:
        """A new connection with the pool's settings, outside the pool (the
        caller closes it), its waits bounded by the pool's watchdog unless
        ``watched=False``. Raises the driver's ``OperationalError`` if it fails."""
        silence = self.watchdog.silence if self.watchdog is not None else DEFAULT_ROUND_TRIP
        settings = connection_settings(silence, self._given) | self._kwargs | overrides
        conn = WatchedConnection.connect(self._conninfo, **settings)
        if watched and self.watchdog is not None:
            self.watchdog.watch(conn)
        return conn

    def open(self) -> None:
        """Open the first connection now, so a wrong URL fails here with the
        driver's own reason (refused, no such database, authentication)."""
        conn = self.connect()
        with self._lock:
            self._idle.append(conn)

    def close(self) -> None:
        """Close the idle connections now, and each borrowed one when it comes
        back; a thread waiting for a connection gets ``StoreError``."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            self._freed.notify_all()
            self._opened.notify_all()
        for conn in idle:
            _close_quietly(conn)

    # -- running work ----------------------------------------------------------------
    def run(self, work: Callable[[psycopg.Connection[Any]], T], *, patient: bool = True) -> T:
        """``work`` on a borrowed connection, again on a new one if the
        connection is lost. ``work`` may therefore run more than once, after
        a first run whose commit landed and whose answer was lost: it must be
        idempotent, or recognise what its first run wrote
        (``SQLCore._write_once``).

        Reconnecting is retried with backoff for up to ``reconnect_timeout``
        seconds. With ``patient=False``, stale pooled connections are still
        replaced, but the first new connection that cannot be opened (or is
        lost as soon as it is) raises ``StoreUnavailable`` at once: the caller
        retries on its own schedule."""
        lost_at: float | None = None  # when this call first met a lost connection
        delay = FIRST_DELAY
        conflicts = 0
        while True:
            try:
                conn, fresh = self._checkout()
            except _ConnectFailed as failed:
                now = monotonic()
                lost_at = now if lost_at is None else lost_at
                if not patient:
                    raise postgres_lost(self.where, failed.cause) from failed.cause
                self._give_up_after(lost_at, now, failed.cause)
                self._server_down(failed.cause, delay)
                delay = min(delay * 2, MAX_DELAY)
                continue
            try:
                result = work(conn)
            except BaseException as exc:
                if not connection_lost(exc, conn):
                    self._checkin(conn)
                    if conflicts < CONFLICT_RETRIES and rolled_back_conflict(exc):
                        conflicts += 1
                        continue  # the server undid it all: run it again
                    raise
                self._discard(conn)
                now = monotonic()
                lost_at = now if lost_at is None else lost_at
                self._give_up_after(lost_at, now, exc)
                if getattr(conn, "abandoned", None) is None:  # else the watchdog said why
                    log.warning(
                        "cairn: PostgreSQL connection lost (%s); reconnecting", one_line(exc)
                    )
                if fresh:
                    # Lost on a connection just opened: the server is not back
                    # for good yet. Wait before the next one, or let an
                    # impatient caller retry on its own schedule.
                    if not patient:
                        raise postgres_lost(self.where, exc) from exc
                    self._wait_for_reopen(delay)
                    delay = min(delay * 2, MAX_DELAY)
                continue
            self._checkin(conn)
            return result

    def _give_up_after(self, lost_at: float, now: float, cause: BaseException) -> None:
        if now - lost_at > self.reconnect_timeout:
            raise postgres_lost(self.where, cause, after=self.reconnect_timeout) from cause

    # -- borrowing and giving back ---------------------------------------------------
    def _checkout(self) -> tuple[psycopg.Connection[Any], bool]:
        """A connection, and whether it was just opened. Waits while all
        ``size`` are checked out; raises ``_ConnectFailed`` if opening fails."""
        started = monotonic()
        next_warning = started + POOL_WAIT
        with self._lock:
            while True:
                if self._closed:
                    raise postgres_closed(self.where)
                if self._idle:
                    self._out += 1
                    return self._idle.pop(), False
                if self._out + self._opening < self.size:
                    self._opening += 1
                    break
                now = monotonic()
                if now >= next_warning:
                    self._warn_waiting(now - started)
                    next_warning = now + POOL_WAIT
                self._freed.wait(next_warning - now)
        try:
            conn = self.connect()
        except psycopg.OperationalError as exc:
            with self._lock:
                self._opening -= 1
                self._freed.notify()
            raise _ConnectFailed(exc) from exc
        except BaseException:
            with self._lock:
                self._opening -= 1
                self._freed.notify()
            raise
        with self._lock:
            self._opening -= 1
            self._out += 1
            self._server_back()
        return conn, True

    def _warn_waiting(self, waited: float) -> None:
        """Called with the lock held, by a thread that has waited ``waited``
        seconds for a connection: say why, truthfully."""
        if self._out == self.size:
            log.warning(
                "cairn: all %d PostgreSQL connections are in use; waiting for one "
                "(raise pool_size in the store URL if this persists)",
                self.size,
            )
        else:
            log.warning(
                "cairn: waited %.0fs for a PostgreSQL connection: %d of %d in use, %d being "
                "opened (is the server at %s slow to accept connections?)",
                waited,
                self._out,
                self.size,
                self._opening,
                self.where,
            )

    def _checkin(self, conn: psycopg.Connection[Any]) -> None:
        """Give ``conn`` back: to the idle list if it is fit to reuse, else closed."""
        fit = not conn.closed and conn.info.transaction_status == pq.TransactionStatus.IDLE
        with self._lock:
            self._out -= 1
            keep = fit and not self._closed
            if keep:
                self._idle.append(conn)
            self._freed.notify()
        if not keep:
            _close_quietly(conn)

    def _discard(self, conn: psycopg.Connection[Any]) -> None:
        """Close ``conn``, lost, and every idle connection with it."""
        with self._lock:
            self._out -= 1
            idle, self._idle = self._idle, []
            self._freed.notify_all()
        for stale in [conn, *idle]:
            _close_quietly(stale)

    # -- an outage, seen from here ---------------------------------------------------
    def _server_down(self, cause: BaseException, delay: float) -> None:
        """Opening a connection failed: log (once per ``LOG_EVERY`` for the whole
        pool) and wait ``delay``, or until another thread gets through."""
        with self._lock:
            now = monotonic()
            if self._down_since is None:
                self._down_since = now
            if now - self._last_warning >= LOG_EVERY:
                if self._last_warning == 0.0:
                    log.warning(
                        "cairn: cannot reach PostgreSQL at %s (%s); trying again every "
                        "%gs at most, for up to %gs",
                        self.where,
                        one_line(cause),
                        MAX_DELAY,
                        self.reconnect_timeout,
                    )
                else:
                    log.warning(
                        "cairn: PostgreSQL at %s still unreachable after %.0fs (%s)",
                        self.where,
                        now - self._down_since,
                        one_line(cause),
                    )
                self._last_warning = now
            if not self._closed:
                self._opened.wait(delay)

    def _wait_for_reopen(self, delay: float) -> None:
        with self._lock:
            if not self._closed:
                self._opened.wait(delay)

    def _server_back(self) -> None:
        """Called with the lock held when a new connection opened."""
        if self._down_since is not None:
            log.warning(
                "cairn: reconnected to PostgreSQL at %s after %.1fs",
                self.where,
                monotonic() - self._down_since,
            )
            self._down_since = None
            self._last_warning = 0.0
        self._opened.notify_all()


def _close_quietly(conn: psycopg.Connection[Any]) -> None:
    with contextlib.suppress(psycopg.Error):  # a broken connection has nothing left to fail
        conn.close()
