"""What the dashboard checks before a request reaches a page.

- **Host.** A page on ``evil.example`` can rebind its name to 127.0.0.1 and then
  read the dashboard as same-origin; its requests still say ``Host:
  evil.example``. So only the names the server was bound for are answered
  (:func:`allowed_hosts`), on every request, GET included.
- **Origin.** A POST must come from the dashboard's own origin (``Origin``, or
  ``Referer`` when a client sends no ``Origin``); the per-server form secret is
  checked too, later, by the action itself.
- **Token and session.** The token is compared as bytes, so any text offered is
  simply right or wrong. Once presented as ``?token=``, the browser gets a random
  session id, never the token (:class:`Sessions`).
- **Body.** ``Content-Length`` must be a plain number under :data:`MAX_BODY`, and
  a form body ASCII that decodes as UTF-8 (:func:`read_form`).

Every answer, refusals included, carries :data:`SECURITY_HEADERS`. The functions
here are pure (header values in, a value or :class:`Refused` out); the ASGI
middleware that applies them to each request is :mod:`cairn.ui.middleware`.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from http import HTTPStatus
from urllib.parse import parse_qs, urlsplit

# The forms post two short fields; anything near this is not the dashboard's.
MAX_BODY = 16 * 1024
MAX_FORM_FIELDS = 20
# Sessions live in memory until the server stops; the oldest go past this many.
MAX_SESSIONS = 1024
SESSION_COOKIE = "cairn_session"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")

# Scripts and styles only from the dashboard's own static files (htmx, its CSS):
# no inline script or style attribute can run. connect-src for htmx's polling.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; "
    "script-src 'self'; "
    "style-src 'self'; "
    "img-src 'self'; "
    "connect-src 'self'; "
    "form-action 'self'; "
    "frame-ancestors 'none'; "
    "base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cache-Control": "no-store",
}


class Refused(Exception):
    """A request answered with ``status`` and a one-line plain-text ``reason``."""

    def __init__(self, status: HTTPStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def bracketed(host: str) -> str:
    """A bare IPv6 address as it appears in a Host header: ``[::1]``."""
    try:
        if ipaddress.ip_address(host).version == 6:
            return f"[{host}]"
    except ValueError:
        pass
    return host


def _has_port(name: str) -> bool:
    if name.startswith("["):
        return "]:" in name
    return name.count(":") == 1


def allowed_hosts(bound: Iterable[str], port: int, extra: Iterable[str] = ()) -> frozenset[str]:
    """The Host header values answered: each loopback name and each ``bound``
    address at ``port``; each ``extra`` name at ``port`` and also bare (as a
    reverse proxy on port 80 or 443 sends it), or exactly as given with a port."""
    names = {f"{name}:{port}" for name in LOOPBACK_NAMES}
    names.update(f"{bracketed(host)}:{port}" for host in bound if host)
    for name in extra:
        name = bracketed(name.strip())
        if _has_port(name):
            names.add(name)
        elif name:
            names.update((name, f"{name}:{port}"))
    return frozenset(name.lower() for name in names)


def check_host(hosts: Sequence[str], allowed: frozenset[str]) -> str:
    """The request's Host (``hosts``: every Host header it sent), if it is one of
    ``allowed``; otherwise :class:`Refused`."""
    if len(hosts) != 1 or hosts[0].strip().lower() not in allowed:
        raise Refused(
            HTTPStatus.MISDIRECTED_REQUEST,
            "this dashboard answers only for Host "
            + ", ".join(sorted(allowed))
            + "; start it with --allow-host NAME to add a name",
        )
    return str(hosts[0]).strip().lower()


def check_origin(origin: str | None, referer: str | None, host: str) -> None:
    """Refuse a POST that does not come from a page of this dashboard at ``host``."""
    source = origin or referer or ""
    parts = urlsplit(source)
    if parts.scheme not in ("http", "https") or parts.netloc.lower() != host:
        raise Refused(HTTPStatus.FORBIDDEN, "cross-origin POST refused")


def same_secret(offered: str, secret: str) -> bool:
    """Constant-time comparison of any two strings; non-ASCII is just unequal."""
    # compare_digest raises TypeError on non-ASCII str, so compare the bytes.
    return hmac.compare_digest(
        offered.encode("utf-8", "surrogatepass"), secret.encode("utf-8", "surrogatepass")
    )


class Sessions:
    """Random session ids handed out once the token has been presented."""

    def __init__(self, limit: int = MAX_SESSIONS) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()  # pages are rendered on worker threads
        self._limit = limit

    def open(self) -> str:
        session = secrets.token_urlsafe(32)
        with self._lock:
            self._ids[session] = None
            while len(self._ids) > self._limit:
                self._ids.popitem(last=False)
        return session

    def valid(self, session: str) -> bool:
        with self._lock:
            # A lookup, not a comparison: the id is a 256-bit random key.
            return bool(session) and session in self._ids


def session_cookie(session: str) -> str:
    return f"{SESSION_COOKIE}={session}; HttpOnly; SameSite=Strict; Path=/"


def cookie_value(cookies: Iterable[str], name: str) -> str:
    """The value of cookie ``name`` in the ``Cookie`` headers ``cookies``, or ``""``;
    any malformed text is skipped."""
    for header in cookies:
        for pair in str(header).split(";"):
            key, sep, value = pair.strip().partition("=")
            if sep and key == name:
                return value.strip()
    return ""


def content_length(lengths: Sequence[str], transfer_encoding: bool) -> int:
    """The body's length from the request's ``Content-Length`` values; refused when
    malformed, repeated with different values, too large, or chunked."""
    if transfer_encoding:
        raise Refused(HTTPStatus.BAD_REQUEST, "send a Content-Length, not Transfer-Encoding")
    values = {value.strip() for value in lengths}
    if not values:
        return 0
    text = values.pop()
    # isdecimal() alone would let '٣' or '+3' through int(); only ASCII digits.
    if values or not (text.isascii() and text.isdigit()) or len(text) > 12:
        raise Refused(HTTPStatus.BAD_REQUEST, "malformed Content-Length")
    length = int(text)
    if length > MAX_BODY:
        raise Refused(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {MAX_BODY} bytes")
    return length


def parse_form(data: bytes, length: int) -> dict[str, list[str]]:
    """The urlencoded form in ``data`` (which should be ``length`` bytes), or
    :class:`Refused` with a 400 reason."""
    if len(data) != length:
        raise Refused(HTTPStatus.BAD_REQUEST, "body shorter than its Content-Length")
    try:
        return parse_qs(data.decode("ascii"), errors="strict", max_num_fields=MAX_FORM_FIELDS)
    except (UnicodeDecodeError, ValueError):
        raise Refused(HTTPStatus.BAD_REQUEST, "malformed form body") from None
