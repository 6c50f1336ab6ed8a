"""Small real HTTP servers on 127.0.0.1 that tests and examples start and count calls on.

Each runs ``http.server.ThreadingHTTPServer`` on a free port in a thread of the
process that starts it, so what it counts survives any client subprocess being
SIGKILLed. Only the standard library is used: ``import cairn.testing.servers``
works wherever cairn is installed. Use one as a context manager and hand its
``url`` to the code under test::

    with PaymentServer() as payments:
        run_the_batch(payments.url)
        assert payments.charges_by_item() == {...}

``PaymentServer`` is a payment API that honours ``Idempotency-Key`` (or, with
``honor_keys=False``, one that charges every request, which makes any double
call visible). ``WebhookServer`` is a chat webhook that records every post and
can be told to answer errors for a while. ``ApiServer`` is an outside API that
logs when each request arrived (for rate limits, with ``busiest_window``).

A simulated service of your own subclasses ``LocalServer`` and answers in
``answer(request, method)``, with ``request.read_body()`` and
``request.send_json(status, body)`` (``examples/revenue_pipeline/simulated.py``
does so).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

JsonObject = dict[str, Any]
# How often the serving thread checks for shutdown: stopping takes up to this.
SHUTDOWN_POLL_SECONDS = 0.02


class RequestHandler(BaseHTTPRequestHandler):
    """One request: handed to the ``LocalServer`` that owns the socket, which
    answers it with ``read_body`` and ``send_json``."""

    # HTTP/1.0: one request per connection, so no idle keep-alive thread holds
    # up shutdown.
    protocol_version = "HTTP/1.0"
    server: _OwnedHTTPServer

    def do_GET(self) -> None:
        self.server.owner.answer(self, "GET")

    def do_POST(self) -> None:
        self.server.owner.answer(self, "POST")

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
        """Quiet: tests read the server's counters, not its log."""

    def read_body(self) -> bytes:
        """The request's body (empty without a ``Content-Length``)."""
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def send_json(self, status: int, body: object, headers: dict[str, str] | None = None) -> None:
        """Answer ``status`` with ``body`` as JSON, and any extra ``headers``."""
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


class _OwnedHTTPServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer that knows its ``LocalServer`` and stays quiet when a
    client vanishes mid-answer (a SIGKILLed subprocess does exactly that)."""

    def __init__(self, owner: LocalServer) -> None:
        super().__init__(("127.0.0.1", 0), RequestHandler)
        self.owner = owner

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A dead client is expected here; any other error is printed as usual."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class LocalServer:
    """Base: a threaded HTTP server on a free local port, started on ``start()``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._httpd: _OwnedHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, without a trailing slash."""
        if self._httpd is None:
            raise RuntimeError("the server is not started; use it as a context manager")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Self:
        self._httpd = _OwnedHTTPServer(self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS},
            name=type(self).__name__,
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join()
        self._httpd = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def answer(self, request: RequestHandler, method: str) -> None:
        """Serve one request; subclasses route on ``method`` and the path."""
        raise NotImplementedError


# -- the payment API --------------------------------------------------------------------


class PaymentServer(LocalServer):
    """A payment API: ``POST /charges`` charges once per ``Idempotency-Key``.

    - ``POST /charges`` with JSON ``{"item": ..., "amount": ...}``: a key seen
      before gets the original charge back (200) and nothing is charged; a new
      key is charged (201). With ``honor_keys=False`` every request is charged.
    - ``GET /charges?key=K``: the charge made under key ``K`` (200), or 404.
    - ``GET /stats``: ``{"charges_by_item": {...}, "requests": n}``.

    ``delay`` seconds pass between making a charge and answering, the window in
    which a client that dies leaves its caller in doubt.
    """

    def __init__(self, *, honor_keys: bool = True, delay: float = 0.0) -> None:
        super().__init__()
        self.honor_keys = honor_keys
        self.delay = delay
        self._changed = threading.Condition(self._lock)
        self._charges: list[JsonObject] = []
        self._by_key: dict[str, JsonObject] = {}
        self._requests = 0
        self._requests_by_key: Counter[str] = Counter()

    # -- what tests read -------------------------------------------------------------
    @property
    def requests(self) -> int:
        """Complete ``POST /charges`` requests received so far, charged or not
        (a request cut short by its client's death is refused and not counted)."""
        with self._lock:
            return self._requests

    def charges_by_item(self) -> dict[str, int]:
        """How many times each item was really charged."""
        with self._lock:
            return dict(Counter(str(charge["item"]) for charge in self._charges))

    def requests_by_key(self) -> dict[str, int]:
        """Complete ``POST /charges`` requests received per idempotency key."""
        with self._lock:
            return dict(self._requests_by_key)

    def charge_for(self, key: str) -> JsonObject | None:
        with self._lock:
            return self._by_key.get(key)

    def wait_for_requests(self, at_least: int, timeout: float) -> bool:
        """Block until ``at_least`` POSTs have arrived, or ``timeout`` seconds pass."""
        with self._changed:
            return self._changed.wait_for(lambda: self._requests >= at_least, timeout)

    # -- serving ---------------------------------------------------------------------
    def answer(self, request: RequestHandler, method: str) -> None:
        url = urlsplit(request.path)
        if method == "POST" and url.path == "/charges":
            self._post_charge(request)
        elif method == "GET" and url.path == "/charges":
            self._get_charge(request, parse_qs(url.query).get("key", [""])[0])
        elif method == "GET" and url.path == "/stats":
            request.send_json(
                HTTPStatus.OK,
                {"charges_by_item": self.charges_by_item(), "requests": self.requests},
            )
        else:
            request.send_json(HTTPStatus.NOT_FOUND, {"error": f"no route {method} {url.path}"})

    def _post_charge(self, request: RequestHandler) -> None:
        key = request.headers.get("Idempotency-Key")
        body = _charge_body(request)
        if body is None:
            # Like a real API: a request cut short (its client was killed while
            # sending) or malformed is refused, never charged.
            request.send_json(HTTPStatus.BAD_REQUEST, {"error": "incomplete or bad charge"})
            return
        status, charge = self._charge(key, body)
        if self.delay:
            time.sleep(self.delay)  # real-sleep-ok: a slow answer, served in the server thread
        request.send_json(status, charge)

    def _charge(self, key: str | None, body: JsonObject) -> tuple[int, JsonObject]:
        with self._changed:
            self._requests += 1
            if key is not None:
                self._requests_by_key[key] += 1
            self._changed.notify_all()
            if self.honor_keys and key is not None and key in self._by_key:
                return HTTPStatus.OK, self._by_key[key]
            charge = {
                "id": f"ch_{len(self._charges) + 1}",
                "item": body.get("item"),
                "amount": body.get("amount"),
                "key": key,
            }
            self._charges.append(charge)
            if key is not None:
                self._by_key.setdefault(key, charge)
            return HTTPStatus.CREATED, charge

    def _get_charge(self, request: RequestHandler, key: str) -> None:
        charge = self.charge_for(key)
        if charge is None:
            request.send_json(HTTPStatus.NOT_FOUND, {"error": f"no charge under key {key!r}"})
        else:
            request.send_json(HTTPStatus.OK, charge)


def _charge_body(request: RequestHandler) -> JsonObject | None:
    """The JSON body of a charge request, or None if it is incomplete or bad."""
    expected = int(request.headers.get("Content-Length") or 0)
    raw = request.read_body()
    if len(raw) != expected:
        return None
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(body, dict) or "item" not in body or "amount" not in body:
        return None
    return body


# -- the chat webhook ---------------------------------------------------------------------


@dataclass(frozen=True)
class Post:
    """One POST the webhook received (header names lower-cased), and the status
    it answered."""

    path: str
    headers: dict[str, str]
    body: bytes
    status: int

    def json(self) -> Any:
        return json.loads(self.body)


class WebhookServer(LocalServer):
    """A chat webhook: records every POST; answers 200 unless told otherwise.

    ``fail_next(n, status)`` makes the next ``n`` posts answer ``status``.
    """

    def __init__(self) -> None:
        super().__init__()
        self._posts: list[Post] = []
        self._failures: list[int] = []

    @property
    def posts(self) -> list[Post]:
        """Every POST received, in order, whatever was answered."""
        with self._lock:
            return list(self._posts)

    @property
    def delivered(self) -> list[Post]:
        """The POSTs answered with a 2xx status."""
        return [post for post in self.posts if 200 <= post.status < 300]

    def fail_next(self, count: int, status: int = HTTPStatus.INTERNAL_SERVER_ERROR) -> None:
        with self._lock:
            self._failures.extend([status] * count)

    def answer(self, request: RequestHandler, method: str) -> None:
        if method != "POST":
            request.send_json(HTTPStatus.METHOD_NOT_ALLOWED, {"error": "POST only"})
            return
        body = request.read_body()
        with self._lock:
            status = self._failures.pop(0) if self._failures else HTTPStatus.OK
            headers = {name.lower(): value for name, value in request.headers.items()}
            self._posts.append(Post(request.path, headers, body, status))
        request.send_json(status, {"ok": status == HTTPStatus.OK})


def wait_until(predicate: Callable[[], bool], timeout: float, poll: float = 0.005) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` seconds pass (for subprocesses)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)  # real-sleep-ok: waiting on a real subprocess
    return True


# -- a rate-limited outside API ---------------------------------------------------------------


@dataclass(frozen=True)
class Arrival:
    """One request as the API saw it: when it arrived (the server's own
    ``time.monotonic()``), its path, and how many requests were in flight then,
    itself included."""

    at: float
    path: str
    in_flight: int


class ApiServer(LocalServer):
    """A simulated outside API that keeps its own request log.

    Every request is logged on arrival by the server's clock, so tests check a
    rate limit as the server saw it, not as the client meant it. It answers
    ``200 {"ok": true}`` after ``hold`` seconds, unless ``answer_next`` queued
    other answers (a status and headers), which are used first, in order.
    """

    def __init__(self, *, hold: float = 0.0) -> None:
        super().__init__()
        self.hold = hold
        self._arrivals: list[Arrival] = []
        self._in_flight = 0
        self._queued: list[tuple[int, dict[str, str]]] = []

    @property
    def arrivals(self) -> list[Arrival]:
        with self._lock:
            return list(self._arrivals)

    def answer_next(
        self, status: int, headers: dict[str, str] | None = None, count: int = 1
    ) -> None:
        with self._lock:
            self._queued.extend([(status, dict(headers or {}))] * count)

    def answer(self, request: RequestHandler, method: str) -> None:
        request.read_body()
        with self._lock:
            self._in_flight += 1
            self._arrivals.append(Arrival(time.monotonic(), request.path, self._in_flight))
            status, headers = self._queued.pop(0) if self._queued else (HTTPStatus.OK, {})
        try:
            if self.hold:
                time.sleep(self.hold)  # real-sleep-ok: a slow answer, served in the server thread
            data = json.dumps({"ok": status == HTTPStatus.OK}).encode()
            request.send_response(status)
            for name, value in headers.items():
                request.send_header(name, value)
            request.send_header("Content-Type", "application/json")
            request.send_header("Content-Length", str(len(data)))
            request.end_headers()
            request.wfile.write(data)
        finally:
            with self._lock:
                self._in_flight -= 1


def busiest_window(times: list[float], window: float) -> int:
    """The most of ``times`` that fall in any half-open span ``[t, t + window)``.

    The busiest span can always be slid to start at one of the times, so checking
    the span starting at each time checks every sliding window."""
    ordered = sorted(times)
    busiest, end = 0, 0
    for start, first in enumerate(ordered):
        while end < len(ordered) and ordered[end] < first + window:
            end += 1
        busiest = max(busiest, end - start)
    return busiest
