"""The outside world of the revenue pipeline, simulated by real HTTP servers.

Each server listens on 127.0.0.1 (a free port) in a thread of the process that
starts it, and counts every call it receives: the tests read those counters,
and ``--simulate`` starts them in-process. They build on the local servers in
``cairn.testing.servers``, which come with cairn.

- ``ReportingServer``: an ad-reporting API, revenue per country for a UTC window.
  It can run out of quota (HTTP 429, gRPC status ``RESOURCE_EXHAUSTED``) and
  deny countries (403, ``PERMISSION_DENIED``).
- ``StoreServer``: an app store's API, installs per app for a window given in
  America/Los_Angeles time, behind bearer tokens that expire (401 once expired).
- The chat webhook is ``cairn.testing.servers.WebhookServer``: it records every post.

``Simulation`` starts all of them, with a database file that holds the
previous week's revenue.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from collections import Counter
from contextlib import ExitStack
from datetime import UTC, date, datetime, timedelta
from http import HTTPStatus
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

from cairn.testing.servers import LocalServer, RequestHandler, WebhookServer

from .database import Database
from .settings import COUNTRIES, LOS_ANGELES, Settings

__all__ = ["ReportingServer", "Simulation", "StoreServer", "WebhookServer", "revenue_micros"]

# Countries whose revenue on the day reported jumps or drops, so the anomaly
# step has something to find: a multiplier on the usual revenue.
PLANTED_ANOMALIES = {"BR": 1.5, "KR": 0.6}


def _stable(*parts: str) -> int:
    """A stable pseudo-random number for the simulation."""
    return int(hashlib.sha256("/".join(parts).encode()).hexdigest()[:8], 16)


def revenue_micros(
    country: str, start: datetime, end: datetime, *, anomalies: dict[str, float] | None = None
) -> int:
    """The revenue (USD micros) the reporting API reports for ``country`` in [start, end).

    Summed hour by hour (UTC): each hour within ±10% of the country's usual
    level, times the planted anomaly if any.
    """
    usual_hour = (1_000 + _stable(country) % 9_000) / 24
    factor = (anomalies or {}).get(country, 1.0)
    total, hour = 0.0, start.astimezone(UTC)
    while hour < end:
        wobble = 0.9 + (_stable(country, hour.isoformat()) % 200) / 1000
        total += usual_hour * wobble * factor
        hour += timedelta(hours=1)
    return round(total * 1_000_000)


def _grpc_error(code: int, status: str, message: str, **extra: Any) -> dict[str, Any]:
    """The JSON error body Google-style APIs send: HTTP code plus a gRPC status."""
    return {"error": {"code": code, "status": status, "message": message, **extra}}


def _parse_time(text: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


# -- the ad-reporting API -------------------------------------------------------------


class ReportingServer(LocalServer):
    """``GET /v1/revenue?countries=US,JP&from=...Z&to=...Z``: revenue per country.

    ``from`` and ``to`` must be UTC (``Z``); the answer is one row per country,
    its revenue in the window. ``quota``: how many calls succeed before the
    API answers RESOURCE_EXHAUSTED; it keeps answering so for ``rejections``
    calls (None: until ``refill()``). Countries in ``denied`` are answered 403
    PERMISSION_DENIED.
    """

    def __init__(
        self,
        *,
        quota: int | None = None,
        rejections: int | None = None,
        denied: frozenset[str] = frozenset(),
        retry_delay: int = 30,
        anomalies: dict[str, float] | None = None,
    ) -> None:
        super().__init__()
        self.quota = quota
        self.rejections = rejections
        self.denied = denied
        self.retry_delay = retry_delay
        self.anomalies = PLANTED_ANOMALIES if anomalies is None else anomalies
        self._served = 0
        self._rejected = 0
        self.requested_by_country: Counter[str] = Counter()
        self.served_by_country: Counter[str] = Counter()
        self.statuses: Counter[int] = Counter()

    def refill(self) -> None:
        """The quota resets: calls succeed again."""
        with self._lock:
            self._refill()

    def counts(self) -> tuple[dict[str, int], dict[str, int]]:
        """(requests per country, successful answers per country)."""
        with self._lock:
            return dict(self.requested_by_country), dict(self.served_by_country)

    def answer(self, request: RequestHandler, method: str) -> None:
        url = urlsplit(request.path)
        if method != "GET" or url.path != "/v1/revenue":
            request.send_json(HTTPStatus.NOT_FOUND, {"error": f"no route {method} {url.path}"})
            return
        query = {name: values[0] for name, values in parse_qs(url.query).items()}
        countries = [c for c in query.get("countries", "").split(",") if c]
        with self._lock:
            self.requested_by_country.update(countries)
            status, body, headers = self._decide(countries, query)
            if status == HTTPStatus.OK:
                self.served_by_country.update(countries)
            self.statuses[status] += 1
        request.send_json(status, body, headers)

    def _decide(
        self, countries: list[str], query: dict[str, str]
    ) -> tuple[int, object, dict[str, str]]:
        start, end = _parse_time(query.get("from", "")), _parse_time(query.get("to", ""))
        if not countries or start is None or end is None or not query["from"].endswith("Z"):
            message = "countries, and from/to as UTC timestamps ending in Z, are required"
            return 400, _grpc_error(400, "INVALID_ARGUMENT", message), {}
        denied = sorted(set(countries) & self.denied)
        if denied:
            message = f"the caller may not read revenue for {', '.join(denied)}"
            return 403, _grpc_error(403, "PERMISSION_DENIED", message), {}
        if self.quota is not None and self._served >= self.quota:
            if self.rejections is None or self._rejected < self.rejections:
                self._rejected += 1
                delay = f"{self.retry_delay}s"
                info = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}
                body = _grpc_error(429, "RESOURCE_EXHAUSTED", "quota exceeded", details=[info])
                return 429, body, {"Retry-After": str(self.retry_delay)}
            self._refill()  # the rejections asked for are spent: the quota is back
        self._served += 1
        rows = [
            {
                "country": country,
                "from": start.isoformat(),
                "to": end.isoformat(),
                "revenue_micros": revenue_micros(country, start, end, anomalies=self.anomalies),
            }
            for country in countries
        ]
        return 200, {"timezone": "UTC", "currency": "USD", "rows": rows}, {}

    def _refill(self) -> None:
        self.quota = None
        self._rejected = 0


# -- an app store's API ------------------------------------------------------------------


class StoreServer(LocalServer):
    """An app store: ``POST /oauth/token`` issues a bearer token;
    ``GET /v1/apps/APP/installs?from=...&to=...`` (America/Los_Angeles times)
    answers that app's installs, or 401 once the token has expired.

    A token expires ``token_ttl`` seconds after it is issued, or once it has
    served ``token_uses`` requests (a deterministic stand-in for time passing).
    """

    def __init__(
        self, name: str, *, token_ttl: float = 20 * 60.0, token_uses: int | None = None
    ) -> None:
        super().__init__()
        self.name = name
        self.token_ttl = token_ttl
        self.token_uses = token_uses
        self._numbers = itertools.count(1)
        self._tokens: dict[str, tuple[float, int]] = {}  # token -> (issued, uses)
        self.tokens_issued = 0
        self.requested_by_app: Counter[str] = Counter()
        self.served_by_app: Counter[str] = Counter()
        self.rejected_by_app: Counter[str] = Counter()

    def expire_tokens(self) -> None:
        """Every token issued so far expires now."""
        with self._lock:
            self._tokens.clear()

    def counts(self) -> tuple[int, dict[str, int], dict[str, int]]:
        """(tokens issued, requests per app, successful answers per app)."""
        with self._lock:
            return self.tokens_issued, dict(self.requested_by_app), dict(self.served_by_app)

    def answer(self, request: RequestHandler, method: str) -> None:
        path = urlsplit(request.path).path
        if method == "POST" and path == "/oauth/token":
            request.read_body()
            with self._lock:
                self.tokens_issued += 1
                token = f"{self.name}-token-{next(self._numbers)}"
                self._tokens[token] = (time.monotonic(), 0)
            body = {"access_token": token, "token_type": "Bearer", "expires_in": self.token_ttl}
            request.send_json(HTTPStatus.OK, body)
        elif method == "GET" and path.startswith("/v1/apps/") and path.endswith("/installs"):
            self._installs(request, path.split("/")[3])
        else:
            request.send_json(HTTPStatus.NOT_FOUND, {"error": f"no route {method} {path}"})

    def _installs(self, request: RequestHandler, app_id: str) -> None:
        query = {k: v[0] for k, v in parse_qs(urlsplit(request.path).query).items()}
        start, end = _parse_time(query.get("from", "")), _parse_time(query.get("to", ""))
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        with self._lock:
            self.requested_by_app[app_id] += 1
            if not self._use(token):
                self.rejected_by_app[app_id] += 1
                status: int = HTTPStatus.UNAUTHORIZED
                body: dict[str, Any] = {
                    "error": "invalid_token",
                    "error_description": "the access token expired",
                }
            elif start is None or end is None or not _in_los_angeles(start, end):
                status = HTTPStatus.BAD_REQUEST
                body = {"error": "from/to must be America/Los_Angeles times with their offset"}
            else:
                self.served_by_app[app_id] += 1
                status = HTTPStatus.OK
                installs = 100 + _stable(self.name, app_id, start.date().isoformat()) % 900
                body = {
                    "app": app_id,
                    "installs": installs,
                    "from": start.isoformat(),
                    "to": end.isoformat(),
                    "timezone": "America/Los_Angeles",
                }
        request.send_json(status, body)

    def _use(self, token: str) -> bool:
        """Spend one use of ``token``; False if it is unknown or expired."""
        found = self._tokens.get(token)
        if found is None:
            return False
        issued, uses = found
        expired_by_time = time.monotonic() - issued >= self.token_ttl
        expired_by_use = self.token_uses is not None and uses >= self.token_uses
        if expired_by_time or expired_by_use:
            del self._tokens[token]
            return False
        self._tokens[token] = (issued, uses + 1)
        return True


def _in_los_angeles(*moments: datetime) -> bool:
    return all(m.utcoffset() == m.astimezone(LOS_ANGELES).utcoffset() for m in moments)


# -- all of them together ------------------------------------------------------------------


class Simulation:
    """Every outside service of the pipeline, started together, with a database
    file under ``workdir`` that holds the previous week's revenue.

    ``settings(...)`` gives the pipeline's settings pointing at them.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        reporting: ReportingServer | None = None,
        apple: StoreServer | None = None,
        google: StoreServer | None = None,
    ) -> None:
        self.workdir = workdir
        self.reporting = reporting or ReportingServer()
        self.apple = apple or StoreServer("apple")
        self.google = google or StoreServer("google")
        self.chat = WebhookServer()
        self.database = workdir / "revenue.db"
        self._stack = ExitStack()

    def __enter__(self) -> Self:
        self.workdir.mkdir(parents=True, exist_ok=True)
        for server in (self.reporting, self.apple, self.google, self.chat):
            self._stack.enter_context(server)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def seed_previous_week(self, window: dict[str, Any]) -> None:
        """The revenue the database holds for a week before the window's day,
        as the reporting API reported it then (without the planted anomalies)."""
        week = timedelta(days=7)
        before = (date.fromisoformat(window["day"]) - week).isoformat()
        revenue = {
            country: revenue_micros(country, window["from"] - week, window["to"] - week)
            for country in COUNTRIES
        }
        Database(self.database).seed_revenue(before, revenue)

    def settings(self, **knobs: Any) -> Settings:
        """Settings that point at these services; ``knobs`` sets or overrides the rest."""
        services = {
            "reporting_url": self.reporting.url,
            "apple_url": self.apple.url,
            "google_url": self.google.url,
            "chat_url": f"{self.chat.url}/hooks/revenue",
            "database": self.database,
        }
        return Settings(**{**services, **knobs})
