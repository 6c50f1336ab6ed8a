"""A TCP proxy in front of PostgreSQL that can lose the answer to a commit.

A write whose commit the server made, but whose answer never reached the
client (the connection dropped in between), is the case a store's retried
write must tell from a real clash: the row is there, and the retry finds it.
A real server cannot be made to drop its answer on cue; this proxy can::

    with LosingProxy(pg_url) as proxy:
        store_url = proxy.url            # the same database, through the proxy
        proxy.lose_answer(after=b"marker", to=b"COMMIT")
        ...                              # the write: its COMMIT is answered, unheard
        assert proxy.lost == 1

Once a client message holding ``after`` has gone through, the next message
of the same connection holding ``to`` (the same message when ``to`` is None:
an autocommit statement commits before it is answered) is forwarded to the
server, and whatever the server answers to it is thrown away: the proxy
closes both ends instead, as a network that failed would. Every other byte
is forwarded as it is. The server is never stopped: only the test's own
connections are cut.
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
        self._sockets: list[socket.socket] = []
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
            sockets = list(self._sockets)
        for sock in sockets:
            _close(sock)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._target)
            with self._lock:
                self._sockets += [client, server]
            link = _Link(self, client, server)
            threading.Thread(target=link.upstream, daemon=True).start()
            threading.Thread(target=link.downstream, daemon=True).start()

    def _arm(self, link: _Link, data: bytes) -> None:
        """Called with each client message: does it doom ``link``'s next answer?"""
        with self._lock:
            if self._plan is not None and link.waiting_for is None:
                after, to = self._plan
                if after in data:
                    self._plan = None
                    link.waiting_for = to if to is not None else b""
            if link.waiting_for is not None and link.waiting_for in data:
                link.doomed = True


class _Link:
    """One client connection and its connection to the server."""

    def __init__(self, proxy: LosingProxy, client: socket.socket, server: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.server = server
        self.waiting_for: bytes | None = None
        self.doomed = False

    def upstream(self) -> None:
        """Client to server; marks the link doomed before the fatal message goes."""
        while data := _recv(self.client):
            self.proxy._arm(self, data)
            try:
                self.server.sendall(data)
            except OSError:
                break
        self._close()

    def downstream(self) -> None:
        """Server to client, unless the link is doomed: then the answer is
        dropped and both ends closed."""
        while data := _recv(self.server):
            if self.doomed:
                with self.proxy._lock:
                    self.proxy.lost += 1
                break
            try:
                self.client.sendall(data)
            except OSError:
                break
        self._close()

    def _close(self) -> None:
        _close(self.client)
        _close(self.server)


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(_CHUNK)
    except OSError:
        return b""


def _close(sock: socket.socket) -> None:
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
