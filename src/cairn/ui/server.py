"""The dashboard server: the Starlette app of :mod:`cairn.ui.app` under uvicorn.

It binds 127.0.0.1 by default; binding anywhere else requires a token, checked
on every request (``?token=`` once opens a session, whose random id the browser
keeps in a cookie; or ``Authorization: Bearer``). Before any page, every
request's Host is checked and every POST's Origin (:mod:`cairn.ui.middleware`);
POSTs also carry a per-server form secret, so another site cannot make a
logged-in browser press a button.

The socket is bound here, before uvicorn starts, so port 0 has become a real
port by the time the allowed Host names are computed and the URL printed.
"""

from __future__ import annotations

import logging
import secrets
import socket
import threading

import uvicorn

from cairn.errors import ConfigurationError
from cairn.redaction import register_secret
from cairn.ui import guard
from cairn.ui.app import build_app
from cairn.ui.config import UIConfig, is_loopback
from cairn.ui.middleware import Guard, GuardSettings
from cairn.ui.protocol import GuardedH11Protocol

# uvicorn waits this long for open requests when asked to stop.
GRACEFUL_SHUTDOWN = 5

__all__ = ["DashboardServer", "UIConfig", "serve_in_thread"]


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


class DashboardServer:
    """Serves the pages of one store: :meth:`serve_forever` in this thread, or
    :func:`serve_in_thread`; :meth:`shutdown` stops it, :meth:`server_close`
    closes its socket."""

    def __init__(self, address: tuple[str, int], config: UIConfig) -> None:
        if not is_loopback(address[0]) and not config.token:
            raise ConfigurationError(
                f"binding the dashboard to {address[0]} exposes it beyond this machine; "
                "give a --token (checked on every request), or bind 127.0.0.1"
            )
        config.csrf = config.csrf or secrets.token_urlsafe(24)
        # Nothing the dashboard writes (the audit trail among it) may hold the token.
        register_secret(config.token)
        self.config = config
        self.socket = _bind(*address)
        self.server_address: tuple[str, int] = self.socket.getsockname()[:2]
        bound = {address[0], str(self.server_address[0])} - {"localhost"}
        port = int(self.server_address[1])
        hosts = guard.allowed_hosts(sorted(bound), port, config.allow_hosts)
        self.settings = GuardSettings(hosts, config.token)
        self.hosts = hosts
        asgi = Guard(build_app(config), self.settings)
        self._uvicorn = uvicorn.Server(
            uvicorn.Config(
                asgi,
                http=GuardedH11Protocol,
                lifespan="off",
                log_config=None,
                access_log=False,
                server_header=False,
                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN,
            )
        )
        self._stopped = threading.Event()
        self._stopped.set()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{guard.bracketed(str(host))}:{port}"

    def serve_forever(self) -> None:
        """Serve until :meth:`shutdown` (or, in the main thread, Ctrl-C)."""
        logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
        self._stopped.clear()
        try:
            self._uvicorn.run(sockets=[self.socket])
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        """Ask the server to stop and wait until it has."""
        self._uvicorn.should_exit = True
        self._stopped.wait()

    def server_close(self) -> None:
        self.socket.close()


def serve_in_thread(server: DashboardServer) -> threading.Thread:
    """Start ``server`` in a daemon thread; stop it with ``server.shutdown()``."""
    started = threading.Event()
    server._stopped.clear()  # so a shutdown() right after this waits for the run

    def run() -> None:
        started.set()
        server.serve_forever()

    thread = threading.Thread(target=run, name="cairn-ui", daemon=True)
    thread.start()
    started.wait()
    return thread
