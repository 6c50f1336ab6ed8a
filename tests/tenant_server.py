"""A local API that counts, by its own bookkeeping, how many calls of each tenant
it is serving at once (the keyed-limit tests: ``Concurrency(n, key=tenant)``).

A call is ``POST /TENANT/N``. The server notes every arrival in order, the most
calls of each tenant it ever had in flight together, and answers after ``hold``
seconds. Tests read ``peaks`` and ``order``: what the server saw, not what the
client meant.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from http import HTTPStatus

import httpx

from cairn.testing.servers import LocalServer, RequestHandler


class TenantServer(LocalServer):
    """Serves ``POST /TENANT/N``; keeps each tenant's peak of calls in flight."""

    def __init__(self, *, hold: float = 0.0) -> None:
        super().__init__()
        self.hold = hold
        self._in_flight: Counter[str] = Counter()
        self._peaks: Counter[str] = Counter()
        self._order: list[tuple[str, str]] = []
        self._peak_all = 0

    @property
    def peaks(self) -> dict[str, int]:
        """The most calls of each tenant the server ever served at once."""
        with self._lock:
            return dict(self._peaks)

    @property
    def peak_all(self) -> int:
        """The most calls, of all tenants together, served at once."""
        with self._lock:
            return self._peak_all

    @property
    def order(self) -> list[tuple[str, str]]:
        """(tenant, N) of every call, in the order the server received them."""
        with self._lock:
            return list(self._order)

    def answer(self, request: RequestHandler, method: str) -> None:
        request.read_body()
        tenant, _, n = request.path.strip("/").partition("/")
        with self._lock:
            self._in_flight[tenant] += 1
            self._peaks[tenant] = max(self._peaks[tenant], self._in_flight[tenant])
            self._peak_all = max(self._peak_all, self._in_flight.total())
            self._order.append((tenant, n))
        try:
            if self.hold:
                time.sleep(self.hold)  # real-sleep-ok: a slow answer, served in the server thread
            data = json.dumps({"ok": True}).encode()
            request.send_response(HTTPStatus.OK)
            request.send_header("Content-Type", "application/json")
            request.send_header("Content-Length", str(len(data)))
            request.end_headers()
            request.wfile.write(data)
        finally:
            with self._lock:
                self._in_flight[tenant] -= 1


def call_tenant(base: str, tenant: str, n: int) -> int:
    """One call of ``tenant`` to the server at ``base``."""
    httpx.post(f"{base}/{tenant}/{n}", timeout=30).raise_for_status()
    return n
