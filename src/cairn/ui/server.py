"""The dashboard server: the standard library's threaded HTTP server, no dependencies.

Read-only except two POST actions, retry and cancel, which make the same store
calls as ``cairn retry`` and ``cairn cancel``. It binds 127.0.0.1 by default;
binding anywhere else requires a token, checked on every request (``?token=``
once opens a session, whose random id the browser keeps in a cookie; or
``Authorization: Bearer``). Before any page, every request's Host is checked
and every POST's Origin (:mod:`cairn.ui.guard`); POSTs also carry a per-server
form secret, so another site cannot make a logged-in browser press a button.
"""

from __future__ import annotations

import ipaddress
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from cairn.admin.actions import CANCEL, RETRY, apply_to_task
from cairn.errors import ConfigurationError
from cairn.observe.metrics import compute
from cairn.observe.stalls import Stall, stalls_in
from cairn.store.admin import AdminStore
from cairn.store.records import TASK_STATUSES
from cairn.store.reports import Window
from cairn.ui import guard, pages
from cairn.ui.guard import Refused

# The task actions the dashboard's buttons post, by the last part of their path.
ACTIONS = {"retry": RETRY, "cancel": CANCEL}

PAGE_SIZE = 50
OPS_LIMIT = 200
# A client that stalls mid-request gives its thread back after this long.
REQUEST_TIMEOUT = 30.0


@dataclass
class UIConfig:
    """What the pages need: the store, the time, the token, the stall threshold,
    and the Host names answered besides the loopback ones and the bound address."""

    store: AdminStore
    now: Callable[[], datetime]
    token: str | None = None
    stall_after: float = 15 * 60.0
    page_size: int = PAGE_SIZE
    csrf: str = ""
    allow_hosts: tuple[str, ...] = ()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Handler(BaseHTTPRequestHandler):
    server: DashboardServer
    protocol_version = "HTTP/1.0"
    timeout = REQUEST_TIMEOUT

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
        """Quiet: the dashboard is not a web server log."""

    # -- plumbing -------------------------------------------------------------------
    def end_headers(self) -> None:
        # Here, not in _send, so the stdlib's own error answers carry them too.
        for name, value in guard.SECURITY_HEADERS.items():
            self.send_header(name, value)
        super().end_headers()

    def _send(
        self,
        status: int,
        body: str,
        headers: dict[str, str] | None = None,
        content_type: str = "text/html; charset=utf-8",
    ) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD" and status != HTTPStatus.NO_CONTENT:
            self.wfile.write(data)

    def _refuse(self, refusal: Refused) -> None:
        self.close_connection = True
        self._send(refusal.status, refusal.reason + "\n", content_type="text/plain; charset=utf-8")

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The stdlib's answer to a request it could not parse, as short plain text."""
        # A request line it could not read leaves HTTP/0.9, which has no status line.
        self.request_version = "HTTP/1.0"
        phrase = self.responses.get(code, ("Error", ""))[0]
        self._refuse(Refused(HTTPStatus(code), (message or phrase)[:200]))

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if self.request_version == "HTTP/0.9":
            # Its answers carry no headers, so no CSP: refuse it outright.
            self.send_error(HTTPStatus.BAD_REQUEST, "HTTP/0.9 is not supported")
            return False
        return True

    def _session(self, query: dict[str, list[str]]) -> dict[str, str]:
        """Headers to answer with if this request is authenticated; else Refused."""
        token = self.server.config.token
        if token is None:
            return {}
        sessions = self.server.sessions
        if sessions.valid(guard.cookie_value(self.headers, guard.SESSION_COOKIE)):
            return {}
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Bearer ") and guard.same_secret(auth[7:], token):
            return {}
        offered = query.get("token", [""])[0]
        if offered and guard.same_secret(offered, token):
            return {"Set-Cookie": guard.session_cookie(sessions.open())}
        raise Refused(HTTPStatus.UNAUTHORIZED, "token required: add ?token=...")

    def _handle(self, method: str) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        try:
            host = guard.check_host(self.headers, self.server.hosts)
            headers = self._session(query)
            form: dict[str, list[str]] = {}
            if method == "POST":
                guard.check_origin(self.headers, host)
                form = guard.read_form(self.headers, self.rfile)
        except Refused as refusal:
            self._refuse(refusal)
            return
        if url.path == "/favicon.ico":
            self._send(HTTPStatus.NO_CONTENT, "", headers)
            return
        try:
            status, body = self.server.route(method, url.path, query, form)
        finally:
            self.server.config.store.close_thread()  # one short-lived thread per request
        if status == HTTPStatus.SEE_OTHER:  # a done action: its body is where to go
            headers, body = {**headers, "Location": body}, ""
        self._send(status, body, headers)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")


def _one(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[0] if values else None


class DashboardServer(ThreadingHTTPServer):
    """Serves the pages of one store."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], config: UIConfig) -> None:
        if not is_loopback(address[0]) and not config.token:
            raise ConfigurationError(
                f"binding the dashboard to {address[0]} exposes it beyond this machine; "
                "give a --token (checked on every request), or bind 127.0.0.1"
            )
        config.csrf = config.csrf or secrets.token_urlsafe(24)
        self.config = config
        self.sessions = guard.Sessions()
        super().__init__(address, _Handler)
        # After binding: port 0 has become the real port.
        bound = {address[0], str(self.server_address[0])} - {"localhost"}
        port = int(self.server_address[1])
        self.hosts = guard.allowed_hosts(sorted(bound), port, config.allow_hosts)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{guard.bracketed(str(host))}:{port}"

    def route(
        self, method: str, path: str, query: dict[str, list[str]], form: dict[str, list[str]]
    ) -> tuple[int, str]:
        store, config = self.config.store, self.config
        if method == "POST" and path in ("/task/retry", "/task/cancel"):
            return self._act(path.rsplit("/", 1)[1], form)
        if method != "GET":
            return HTTPStatus.METHOD_NOT_ALLOWED, pages.message_page("Not allowed", "GET only")
        if path == "/":
            return HTTPStatus.OK, pages.batches_page(store.batch_summaries())
        if path == "/tasks":
            return self._tasks(query)
        if path == "/task":
            return self._task(_one(query, "id") or "")
        if path == "/ops":
            ops = list(store.list_operations(limit=OPS_LIMIT))
            return HTTPStatus.OK, pages.ops_page(ops)
        if path == "/stalls":
            return HTTPStatus.OK, pages.stalls_page(self._stalls(), config.stall_after)
        if path == "/metrics":
            return HTTPStatus.OK, pages.metrics_page(compute(store, Window()))
        return HTTPStatus.NOT_FOUND, pages.message_page("Not found", f"No page at {path}")

    def _tasks(self, query: dict[str, list[str]]) -> tuple[int, str]:
        status = _one(query, "status")
        if status is not None and status not in TASK_STATUSES:
            return HTTPStatus.BAD_REQUEST, pages.message_page("Bad status", status)
        before_text = _one(query, "before")
        before = int(before_text) if before_text and before_text.isdigit() else None
        batch = _one(query, "batch")
        size = self.config.page_size
        rows = self.config.store.task_page(status=status, batch=batch, before=before, size=size)
        return HTTPStatus.OK, pages.tasks_page(rows, status, batch, size)

    def _task(self, task_id: str) -> tuple[int, str]:
        task = self.config.store.get_task(task_id)
        if task is None:
            return HTTPStatus.NOT_FOUND, pages.message_page("Not found", f"No task {task_id}")
        steps = list(self.config.store.load_history(task_id).values())
        return HTTPStatus.OK, pages.task_page(task, steps, self.config.csrf)

    def _stalls(self) -> list[Stall]:
        return stalls_in(self.config.store, self.config.now(), self.config.stall_after)

    def _act(self, action: str, form: dict[str, list[str]]) -> tuple[int, str]:
        """Retry or cancel a task by the rules the CLI uses (``cairn.admin``). Done:
        303 to the task's page, so a reload does not post again; refused: the
        reason, the same sentence ``cairn retry``/``cairn cancel`` prints."""
        if not guard.same_secret(_one(form, "csrf") or "", self.config.csrf):
            return HTTPStatus.FORBIDDEN, pages.message_page("Refused", "stale or missing form")
        task_id = _one(form, "id") or ""
        applied = apply_to_task(self.config.store, ACTIONS[action], task_id, self.config.now())
        if applied.task is None:
            return HTTPStatus.NOT_FOUND, pages.message_page("Not found", f"No task {task_id}")
        if not applied.changed:
            return HTTPStatus.CONFLICT, pages.message_page("Nothing done", applied.message)
        return HTTPStatus.SEE_OTHER, f"/task?{urlencode({'id': task_id})}"


def serve_in_thread(server: DashboardServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="cairn-ui", daemon=True)
    thread.start()
    return thread
