"""uvicorn's HTTP/1.1 protocol (h11), with the dashboard's answers to what it
cannot parse.

uvicorn answers a request it cannot parse (a garbled request line, HTTP/0.9, a
malformed or conflicting ``Content-Length``) with its own 400, before any app
sees it; here that 400 carries the security headers too. And a client that
closes its side before the body it announced has arrived gets a 400 saying so,
where uvicorn would close the connection without an answer.
"""

from __future__ import annotations

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle

from cairn.ui import guard

_HEADERS = [(name.encode(), value.encode()) for name, value in guard.SECURITY_HEADERS.items()]
SHORT_BODY = "body shorter than its Content-Length"


class GuardedH11Protocol(H11Protocol):
    """:class:`H11Protocol`, with security headers on its own 400 answers."""

    def send_400_response(self, msg: str) -> None:
        body = (msg + "\n").encode("ascii", "replace")
        headers = [
            (b"Content-Type", b"text/plain; charset=utf-8"),
            (b"Content-Length", str(len(body)).encode()),
            (b"Connection", b"close"),
            *_HEADERS,
        ]
        try:
            for event in (
                h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
                h11.Data(data=body),
                h11.EndOfMessage(),
            ):
                self.transport.write(self.conn.send(event) or b"")
        except h11.LocalProtocolError:
            pass  # an answer was already under way: closing is all that is left
        self.transport.close()

    def eof_received(self) -> None:
        # None until a request's head has arrived, whatever uvicorn's annotation says.
        cycle: RequestResponseCycle | None = self.cycle
        if cycle is not None and cycle.more_body and not cycle.response_started:
            # The client half-closed mid-body: the request can never complete.
            cycle.disconnected = True  # so the app's own answer, if any, is dropped
            self.send_400_response(SHORT_BODY)
