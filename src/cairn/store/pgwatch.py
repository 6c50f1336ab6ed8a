"""No wait on a PostgreSQL connection lasts forever: a silent one is dropped.

A statement whose answer never comes holds its thread for as long as the
connection looks open. TCP keepalives and ``tcp_user_timeout`` end a
connection whose peer stopped acknowledging (cairn sets both by default,
``connection_settings``), but they cannot see a path where something still
acknowledges every byte and forwards nothing: a stuck proxy or pooler, a
middlebox that lost its state, a half-open connection. So cairn
counts the silence itself:

* Every wait psycopg makes on a pooled connection (a statement's answer, a
  commit, a page of a cursor, a connection's startup excepted: that is
  ``connect_timeout``'s) goes through ``WatchedConnection.wait``, which notes
  when the wait is due: ``silence`` seconds on (the store's ``round_trip``
  bound: a third of the app's lease, its renewal cadence).
* One watchdog thread per store looks at the waits past due. Silence alone is
  no proof: a statement may wait for a lock, or simply run long. So it asks the
  server, on a connection of its own, what each one's server process is doing
  (``pg_stat_activity``). Still running the statement: the wait goes on, and is
  looked at again ``silence`` later. Anything else means its answer is not
  coming, and the connection is *abandoned*: the server cannot be reached
  within half of ``silence`` (a black hole takes the check's connection too),
  the process is gone, or it is idle (it answered, and the answer was lost).
* Abandoning shuts the socket down under the waiting thread, with a reset
  (``SO_LINGER`` 0: nothing still queued on it is sent late). The wait fails at
  once with a connection error, and the pool's own reconnect takes over
  (``cairn.store.pgpool``): its retried writes recognise what a first try may
  have written.

A wait on a dead connection therefore ends at most 1.5 times ``silence`` after it
began (half a lease, with the default bound): before the lease of a task whose
write it was can lapse.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import struct
import threading
import weakref
from collections.abc import Callable, Mapping
from time import monotonic
from typing import Any, TypeVar

import psycopg
from psycopg.abc import PQGen

from cairn.store.driver_errors import one_line

log = logging.getLogger("cairn")
RV = TypeVar("RV")

# The bound when no app says otherwise: a third of cairn's default lease (30 s,
# ``cairn.engine.owners.DEFAULT_LEASE_SECONDS``), its renewal cadence.
DEFAULT_ROUND_TRIP = 10.0
# The bound is never shorter than this: a statement on a loaded machine can go
# quiet for a moment, and every look costs the server a connection.
SILENCE_FLOOR = 1.0
# The share of ``silence`` the server is given to say what a silent connection does.
CHECK_SHARE = 0.5
# libpq's own floor for connect_timeout (it treats 1 as 2).
_CONNECT_FLOOR = 2
# Opens a connection with the store's settings and the given overrides.
Connect = Callable[..., psycopg.Connection[Any]]
_ACTIVITY = "SELECT pid, state, wait_event FROM pg_stat_activity WHERE pid = ANY(%s)"
# Waiting for these, a running statement's server process is waiting for us:
# its answer (or the rest of our message) is stuck on the way.
_WAITING_FOR_CLIENT = frozenset({"ClientWrite", "ClientRead"})


def connection_settings(silence: float, given: Mapping[str, object]) -> dict[str, Any]:
    """The libpq settings every connection of a store opens with, bounded by
    ``silence``, for each one the URL (``given``) does not set itself: TCP
    keepalives that end a connection whose peer stopped answering after about
    ``silence`` seconds of quiet, ``tcp_user_timeout`` for data unacknowledged
    as long, and a ``connect_timeout`` as long (libpq ignores the TCP ones on a
    Unix socket or where the system lacks them)."""
    whole = max(1, round(silence))
    settings: dict[str, Any] = {
        "connect_timeout": max(_CONNECT_FLOOR, whole),
        "keepalives": 1,
        "keepalives_idle": max(1, whole // 2),
        "keepalives_interval": max(1, whole // 6),
        "keepalives_count": 3,
        "tcp_user_timeout": max(1000, round(silence * 1000)),
    }
    return {name: value for name, value in settings.items() if name not in given}


class WatchedConnection(psycopg.Connection[Any]):
    """A psycopg connection whose every wait its ``watchdog`` bounds (None: unwatched)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.watchdog: Watchdog | None = None
        # When the wait under way is due for a look (None: no wait), and how
        # many waits there were: the watchdog cuts only the wait it looked at.
        self.due: float | None = None
        self.waits = 0
        self.began = 0.0
        # Why the watchdog abandoned the connection (None: it did not).
        self.abandoned: str | None = None
        self.guard = threading.Lock()

    def wait(self, gen: PQGen[RV], *args: Any, **kwargs: Any) -> RV:
        watchdog = self.watchdog
        if watchdog is None:
            return super().wait(gen, *args, **kwargs)
        self.began = monotonic()
        self.waits += 1
        self.due = self.began + watchdog.silence
        watchdog.running()
        try:
            return super().wait(gen, *args, **kwargs)
        except psycopg.Error as exc:
            if self.abandoned is None:
                raise
            # The driver's words ("server closed the connection") would mislead.
            raise psycopg.OperationalError(self.abandoned) from exc
        finally:
            with self.guard:  # the watchdog cuts only under it, while due is set
                self.due = None


class Watchdog:
    """Bounds the waits of the connections it ``watch``es (see the module doc).

    ``connect`` opens the connection a look at the server uses; ``where``
    names the server in log lines."""

    def __init__(self, silence: float | None, where: str, connect: Connect) -> None:
        # The bound asked for (by the store's creator, then by each app on it;
        # None: nobody asked, and the default holds).
        self._asked = silence
        self.silence = max(SILENCE_FLOOR, DEFAULT_ROUND_TRIP if silence is None else silence)
        self.where = where
        self._connect = connect
        self._cond = threading.Condition()
        self._watched: weakref.WeakSet[WatchedConnection] = weakref.WeakSet()
        self._thread: threading.Thread | None = None
        self._closed = False
        # How many times the server was asked about silent waits, and how many
        # connections were abandoned (for tests).
        self.looks = 0
        self.abandoned = 0

    def bound(self, silence: float) -> None:
        """Bound waits by ``silence`` seconds from now on (never below
        ``SILENCE_FLOOR``); asked twice (two apps sharing a store), the shorter
        bound rules, so neither app's leases can lapse unnoticed."""
        with self._cond:
            self._asked = silence if self._asked is None else min(self._asked, silence)
            self.silence = max(SILENCE_FLOOR, self._asked)
            self._cond.notify_all()

    def watch(self, conn: WatchedConnection) -> None:
        """Bound every wait of ``conn`` from now on."""
        with self._cond:
            self._watched.add(conn)
        conn.watchdog = self

    def unwatch(self, conn: WatchedConnection) -> None:
        """Leave ``conn``'s waits unbounded from now on (a connection that only
        listens for notifications, whose waits are silent by design)."""
        conn.watchdog = None

    def running(self) -> None:
        """Make sure the watchdog thread runs (a wait just began)."""
        if self._thread is None:
            self._start()

    def _start(self) -> None:
        with self._cond:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._watch, name="cairn-pg-watchdog", daemon=True
                )
                self._thread.start()

    def close(self) -> None:
        """Stop the thread; waits are no longer bounded."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # -- the watchdog thread ----------------------------------------------------------------
    def _watch(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                overdue, next_due = self._overdue(monotonic())
                if not overdue:
                    self._cond.wait(max(0.0, next_due - monotonic()))
                    continue
            self._judge(overdue)

    def _overdue(self, now: float) -> tuple[list[tuple[WatchedConnection, int]], float]:
        """The waits to look at now (each with its number), and when to look
        next. Once one is past due, every wait due before the look can end is
        looked at with it: none waits a whole look for the next one."""
        waiting = [(conn, conn.waits, conn.due) for conn in list(self._watched)]
        dues = [due for _, _, due in waiting if due is not None]
        if not dues or min(dues) > now:
            return [], min(dues, default=now + self.silence)
        horizon = now + self.silence * CHECK_SHARE
        overdue = [(c, waits) for c, waits, due in waiting if due is not None and due <= horizon]
        return overdue, now

    def _judge(self, overdue: list[tuple[WatchedConnection, int]]) -> None:
        """Ask the server about the silent connections; abandon each whose answer
        is not coming, and look again later at each it is still working for."""
        pids = [_backend_pid(conn) for conn, _ in overdue]
        self.looks += 1
        doing = _Look(self._connect, pids).result(self.silence * CHECK_SHARE)
        for (conn, waits), pid in zip(overdue, pids, strict=True):
            reason = _why_silent(doing, pid)
            if reason is None:
                _look_later(conn, waits, self.silence)
                continue
            silent = monotonic() - conn.began
            text = (
                f"no answer from PostgreSQL at {self.where} for {silent:.1f}s ({reason}); "
                "cairn dropped the connection"
            )
            if _cut(conn, waits, text):
                self.abandoned += 1
                log.warning("cairn: %s and reconnects", text)


def _backend_pid(conn: WatchedConnection) -> int | None:
    with contextlib.suppress(psycopg.Error):
        return conn.info.backend_pid
    return None


def _why_silent(doing: dict[int, tuple[str, str]] | None, pid: int | None) -> str | None:
    """Why the answer on the connection of server process ``pid`` is not coming,
    by what the server said its processes are ``doing`` (None: it could not be
    asked); None if it is still running the statement."""
    if doing is None:
        return "the server could not be reached to ask why"
    found = doing.get(pid) if pid is not None else None
    if found is None:
        return "its server process is gone"
    state, waiting_for = found
    if state != "active":
        what = state or "not running it"
        return f"its server process is {what}: the statement or its answer was lost"
    if waiting_for in _WAITING_FOR_CLIENT:
        return f"its server process is stuck sending to us ({waiting_for})"
    return None


def _look_later(conn: WatchedConnection, waits: int, silence: float) -> None:
    """The server is still working on ``conn``'s statement: look again later."""
    with conn.guard:
        if conn.due is not None and conn.waits == waits:
            conn.due = monotonic() + silence


def _cut(conn: WatchedConnection, waits: int, reason: str) -> bool:
    """Shut ``conn``'s socket down under its waiting thread, if that thread is
    still in wait number ``waits``: False if the wait ended meanwhile. Under the
    guard, so the socket is still the connection's own (the thread closes the
    connection only after its wait ends)."""
    with conn.guard:
        if conn.due is None or conn.waits != waits:
            return False
        try:
            fd = conn.pgconn.socket
        except psycopg.Error:
            return False  # already closed or broken: its wait ends on its own
        conn.abandoned = reason
        _reset(fd)
    return True


def _reset(fd: int) -> None:
    """Shut the socket ``fd`` down both ways, and make its close a reset, so
    nothing it still queues is sent (and run by the server) after cairn moved on."""
    with contextlib.suppress(OSError):
        sock = socket.socket(fileno=os.dup(fd))
        with sock:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.shutdown(socket.SHUT_RDWR)


class _Look:
    """One look at what the server's processes ``pids`` are doing, on a
    connection of its own, in a thread of its own: the watchdog waits for the
    answer only so long, and cuts the look's connection if it is late."""

    def __init__(self, connect: Connect, pids: list[int | None]) -> None:
        self._connect = connect
        self._pids = [pid for pid in pids if pid is not None]
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._late = False
        self._doing: dict[int, tuple[str, str]] | None = None

    def result(self, timeout: float) -> dict[int, tuple[str, str]] | None:
        """What each process is doing, as (state, wait event); None if the
        server could not say within ``timeout`` seconds."""
        threading.Thread(
            target=self._ask, args=(timeout,), name="cairn-pg-look", daemon=True
        ).start()
        if self._done.wait(timeout):
            return self._doing
        with self._lock:
            self._late = True
            conn = self._conn
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                _reset(conn.pgconn.socket)
        return None

    def _ask(self, timeout: float) -> None:
        try:
            conn = self._connect(connect_timeout=max(_CONNECT_FLOOR, math.ceil(timeout)))
        except psycopg.Error as exc:
            log.debug(
                "cairn: could not ask PostgreSQL about a silent connection: %s", one_line(exc)
            )
            return
        with self._lock:
            late, self._conn = self._late, conn
        try:
            if not late:
                rows = conn.execute(_ACTIVITY, (self._pids,)).fetchall()
                self._doing = {int(pid): (state or "", event or "") for pid, state, event in rows}
                self._done.set()
        except psycopg.Error as exc:
            log.debug(
                "cairn: could not ask PostgreSQL about a silent connection: %s", one_line(exc)
            )
        finally:
            with contextlib.suppress(psycopg.Error):
                conn.close()
