"""The checks of :mod:`cairn.ui.guard`, applied to every request as ASGI middleware.

It wraps the whole Starlette app (outside Starlette's own error handling), so
every answer the app gives, a refusal, a 404 or a 500, carries
:data:`~cairn.ui.guard.SECURITY_HEADERS`. In order: Host, token or session,
then for a POST the Origin and the body, read here in full (bounded in size
and in time) and handed to the page as ``scope["cairn.form"]``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs

from cairn.ui import guard
from cairn.ui.guard import Refused

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# A client that stalls mid-body gives its connection back after this long.
BODY_TIMEOUT = 30.0
FORM_KEY = "cairn.form"
_SECURITY = [
    (name.lower().encode(), value.encode()) for name, value in guard.SECURITY_HEADERS.items()
]


@dataclass
class GuardSettings:
    """What the checks compare with: the Host names answered, the token (if any)
    and the sessions opened with it."""

    hosts: frozenset[str]
    token: str | None = None
    sessions: guard.Sessions = field(default_factory=guard.Sessions)


def header_values(scope: Scope, name: bytes) -> list[str]:
    """Every value of header ``name`` (lower case), as text (latin-1, as sent)."""
    return [value.decode("latin-1") for key, value in scope["headers"] if key == name]


def _one(scope: Scope, name: bytes) -> str | None:
    values = header_values(scope, name)
    return values[0] if values else None


def with_security_headers(send: Send, extra: list[tuple[bytes, bytes]]) -> Send:
    """``send``, adding the security headers (and ``extra``) to the response start."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", []), *_SECURITY, *extra]
        await send(message)

    return sending


async def plain(send: Send, status: int, text: str) -> None:
    """A short plain-text answer that closes the connection."""
    body = (text + "\n").encode()
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _read_body(receive: Receive, length: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size < length:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _no_more_body() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


class Guard:
    """The ASGI middleware: refuses with a plain-text reason, or passes the request on."""

    def __init__(self, app: ASGIApp, settings: GuardSettings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        extra: list[tuple[bytes, bytes]] = []
        secured = with_security_headers(send, extra)
        try:
            host = guard.check_host(header_values(scope, b"host"), self.settings.hosts)
            cookie = self._session(scope)
            if scope["method"] == "POST":
                guard.check_origin(_one(scope, b"origin"), _one(scope, b"referer"), host)
                scope[FORM_KEY] = await self._form(scope, receive)
        except Refused as refusal:
            await plain(secured, refusal.status, refusal.reason)
            return
        if cookie:
            extra.append((b"set-cookie", cookie.encode()))
        await self.app(scope, _no_more_body if scope["method"] == "POST" else receive, secured)

    def _session(self, scope: Scope) -> str:
        """The Set-Cookie to answer with (or ``""``) if this request is
        authenticated; otherwise :class:`Refused`."""
        token = self.settings.token
        if token is None:
            return ""
        sessions = self.settings.sessions
        if sessions.valid(
            guard.cookie_value(header_values(scope, b"cookie"), guard.SESSION_COOKIE)
        ):
            return ""
        auth = _one(scope, b"authorization") or ""
        if auth.startswith("Bearer ") and guard.same_secret(auth[7:], token):
            return ""
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        offered = query.get("token", [""])[0]
        if offered and guard.same_secret(offered, token):
            return guard.session_cookie(sessions.open())
        raise Refused(HTTPStatus.UNAUTHORIZED, "token required: add ?token=...")

    async def _form(self, scope: Scope, receive: Receive) -> dict[str, list[str]]:
        length = guard.content_length(
            header_values(scope, b"content-length"),
            bool(header_values(scope, b"transfer-encoding")),
        )
        try:
            data = await asyncio.wait_for(_read_body(receive, length), BODY_TIMEOUT)
        except TimeoutError:
            raise Refused(HTTPStatus.REQUEST_TIMEOUT, "body not received in time") from None
        return guard.parse_form(data, length)
