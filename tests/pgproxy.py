"""A TCP proxy in front of PostgreSQL that can lose the answer to a commit, or
stop forwarding altogether (a black hole).

**A lost answer.** A write whose commit the server made, but whose answer never
reached the client (the connection dropped in between), is the case a store's
retried write must tell from a real clash: the row is there, and the retry
finds it. A real server cannot be made to drop its answer on cue; this proxy
can::

    with LosingProxy(pg_url) as proxy:
        store_url = proxy.url            # the same database, through the proxy
        proxy.lose_answer(after=b"marker", to=b"COMMIT")
        ...                              # the write: its COMMIT is answered, unheard
        assert proxy.lost == 1

Once a client message holding ``after`` has gone through, the next message
of the same connection holding ``to`` (the same message when ``to`` is None:
an autocommit statement commits before it is answered) is forwarded to the
server, and whatever the server answers to it is thrown away: the proxy
closes both ends instead, as a network that failed would.

**A black hole.** ``black_hole()`` stops all forwarding, on every connection
open then and every one opened until ``heal()``, while every socket stays
open: the proxy's kernel still accepts connections, acknowledges every byte
and answers TCP keepalives, so nothing below the database protocol tells the
client anything is wrong (a stuck middlebox or pooler, or a half-open path).
What either side sends meanwhile is held. ``heal()`` forwards it and carries
on, on every connection whose two ends are both still open; a connection one
end closed during the hole is closed at the other end too, and what it held
is dropped: bytes sent into a hole die with the connection that sent them, as
they do once a TCP stack gives up on them (or the client resets it).

Every other byte is forwarded as it is. The server is never stopped: only the
test's own connections are cut.
"""

from __future__ import annotations

import socket
import threading
from contextlib import suppress
from types import TracebackType
from typing import Self
from urllib.parse import urlsplit, urlunsplit

_CHUNK = 65536


class LosingProxy:
    """A proxy on a free port of 127.0.0.1 to the server of ``url``."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self._target = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self._url = parts
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._lock = threading.Lock()
        self._plan: tuple[bytes, bytes | None] | None = None
        self.lost = 0
        self._closed = False
        self._holed = False
        self._links: list[_Link] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        """``url`` with the proxy's address in place of the server's."""
        port = self._listener.getsockname()[1]
        user = f"{self._url.username}@" if self._url.username else ""
        netloc = f"{user}127.0.0.1:{port}"
        return urlunsplit((self._url.scheme, netloc, self._url.path, self._url.query, ""))

    def lose_answer(self, *, after: bytes, to: bytes | None = None) -> None:
        """Lose the server's answer to the next message holding ``to`` (see the
        module doc), once, on the connection that first sends ``after``."""
        with self._lock:
            self._plan = (after, to)

    def black_hole(self, *, new_connections: bool = True) -> None:
        """Stop forwarding anything, on every connection, sockets left open;
        with ``new_connections=False`` only on those open now (connections
        opened later work: the old ones are half-open, as after a middlebox
        lost their state)."""
        with self._lock:
            self._holed = new_connections
            for link in self._links:
                link.holed = True

    def heal(self) -> None:
        """Forward again: what was held goes through on each connection whose
        ends are both still open; the others are closed (see the module doc)."""
        with self._lock:
            self._holed = False
            links, self._links = self._links, []
            for link in links:
                if link.release():
                    self._links.append(link)

    @property
    def connections(self) -> int:
        """Client connections the proxy holds open right now."""
        with self._lock:
            return len(self._links)

    # -- running ---------------------------------------------------------------------
    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            links, self._links = self._links, []
        for link in links:
            link.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self._target)
            except OSError:
                _close(client)
                continue
            link = _Link(self, client, server)
            with self._lock:
                link.holed = self._holed
                self._links.append(link)
            threading.Thread(target=link.upstream, daemon=True).start()
            threading.Thread(target=link.downstream, daemon=True).start()

    def _arm(self, link: _Link, data: bytes) -> None:
        """Called with each client message: does it doom ``link``'s next answer?
        (Held: ``_lock``.)"""
        if self._plan is not None and link.waiting_for is None:
            after, to = self._plan
            if after in data:
                self._plan = None
                link.waiting_for = to if to is not None else b""
        if link.waiting_for is not None and link.waiting_for in data:
            link.doomed = True

    def _forget(self, link: _Link) -> None:
        with self._lock, suppress(ValueError):
            self._links.remove(link)


class _Link:
    """One client connection and its connection to the server."""

    def __init__(self, proxy: LosingProxy, client: socket.socket, server: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.server = server
        self.waiting_for: bytes | None = None
        self.doomed = False
        # While the proxy is a black hole: what each side sent, held, and
        # whether it closed its end meanwhile.
        self.holed = False
        self.held_up: list[bytes] = []
        self.held_down: list[bytes] = []
        self.client_gone = False
        self.server_gone = False

    def upstream(self) -> None:
        """Client to server; marks the link doomed before the fatal message goes."""
        while True:
            data = _recv(self.client)
            with self.proxy._lock:
                if self.holed:
                    if not data:
                        self.client_gone = True
                        return  # the sockets stay open until the hole heals
                    self.held_up.append(data)
                    continue
                if data:
                    self.proxy._arm(self, data)
            if not data or not _send(self.server, data):
                break
        self._end()

    def downstream(self) -> None:
        """Server to client, unless the link is doomed: then the answer is
        dropped and both ends closed."""
        while True:
            data = _recv(self.server)
            with self.proxy._lock:
                if self.holed:
                    if not data:
                        self.server_gone = True
                        return
                    self.held_down.append(data)
                    continue
                if data and self.doomed:
                    self.proxy.lost += 1
                    data = b""
            if not data or not _send(self.client, data):
                break
        self._end()

    def release(self) -> bool:
        """The hole healed (held: the proxy's ``_lock``): forward what was held
        and go on (True), or close both ends if either closed meanwhile."""
        self.holed = False
        if self.client_gone or self.server_gone:
            self.close()
            return False
        held_up, self.held_up = self.held_up, []
        held_down, self.held_down = self.held_down, []
        sent = all(_send(self.server, data) for data in held_up)
        sent = sent and all(_send(self.client, data) for data in held_down)
        if not sent:
            self.close()
        return sent

    def _end(self) -> None:
        self.close()
        self.proxy._forget(self)

    def close(self) -> None:
        _close(self.client)
        _close(self.server)


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(_CHUNK)
    except OSError:
        return b""


def _send(sock: socket.socket, data: bytes) -> bool:
    try:
        sock.sendall(data)
    except OSError:
        return False
    return True


def _close(sock: socket.socket) -> None:
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
