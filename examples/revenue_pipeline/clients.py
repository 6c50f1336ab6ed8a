"""Calls to the outside services, and what their errors mean for a retry.

Each function is one call; the pipeline wraps them in checkpointed steps.
Errors are classified at the edge: a quota error is ``RetryAfter`` (wait, then
call again, without spending an attempt), a 5xx or a dropped connection is
transient, and any other 4xx is ``Permanent`` (PERMISSION_DENIED fails the run
at once, with the answer recorded).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx

from cairn import Permanent, RetryAfter

from .settings import LOS_ANGELES

# One client for the process: it is thread-safe, and making one per call
# (which httpx.get does) costs more than the call itself on a local server.
_http = httpx.Client(timeout=10.0)


class Unavailable(Exception):
    """The service failed in a way that may pass (5xx, network): retry it."""


def is_transient(error: BaseException) -> bool:
    """The errors a retry can fix."""
    return isinstance(error, Unavailable | RetryAfter | httpx.TransportError)


def raise_for_status(response: httpx.Response) -> None:
    """Map an HTTP answer to cairn's retry vocabulary."""
    code = response.status_code
    if code < 400:
        return
    status, message = _error_of(response)
    if code == 429:
        raise RetryAfter(_retry_delay(response), f"{status}: {message}")
    if code >= 500:
        raise Unavailable(f"{response.request.url.path} answered {code} {status}: {message}")
    raise Permanent(f"{response.request.url.path} answered {code} {status}: {message}")


def _error_of(response: httpx.Response) -> tuple[str, str]:
    """(gRPC-style status, message) from a JSON error body, if there is one."""
    try:
        error = response.json().get("error", {})
    except ValueError:
        return "", response.text[:200]
    if isinstance(error, dict):
        return str(error.get("status", "")), str(error.get("message", ""))
    return str(error), str(response.json().get("error_description", ""))


def _retry_delay(response: httpx.Response) -> float:
    header = response.headers.get("Retry-After", "")
    return float(header) if header.isdigit() else 60.0


def utc_text(moment: datetime) -> str:
    """``2026-11-26T15:00:00Z``: the reporting API takes UTC only."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- the reporting API -------------------------------------------------------------------


def fetch_revenue(url: str, window: dict[str, datetime], countries: list[str]) -> dict[str, int]:
    """Revenue (USD micros) per country in the window, for one chunk of countries."""
    response = _http.get(
        f"{url}/v1/revenue",
        params={
            "countries": ",".join(countries),
            "from": utc_text(window["from"]),
            "to": utc_text(window["to"]),
        },
    )
    raise_for_status(response)
    return {row["country"]: row["revenue_micros"] for row in response.json()["rows"]}


# -- the store APIs ---------------------------------------------------------------------------


def issue_token(url: str) -> str:
    """A new bearer token from the store's token endpoint."""
    response = _http.post(f"{url}/oauth/token", data={"grant_type": "client_credentials"})
    raise_for_status(response)
    token: str = response.json()["access_token"]
    return token


def fetch_installs(
    url: str, token: str, window: dict[str, datetime], app_id: str
) -> dict[str, Any]:
    """The app's installs in the window, asked in America/Los_Angeles time.

    A rejected token is an answer, not an error: ``{"rejected": True}``. The
    pipeline then records a new token and asks again for the apps it rejected.
    """
    response = _http.get(
        f"{url}/v1/apps/{app_id}/installs",
        params={
            "from": window["from"].astimezone(LOS_ANGELES).isoformat(),
            "to": window["to"].astimezone(LOS_ANGELES).isoformat(),
        },
        headers={"Authorization": f"Bearer {token}"},
    )
    if response.status_code == 401:
        return {"app": app_id, "rejected": True}
    raise_for_status(response)
    return {"app": app_id, "installs": response.json()["installs"]}
