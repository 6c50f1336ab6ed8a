"""Calls to the outside services, and what their errors mean for a retry.

Each function is one call; the pipeline wraps them in checkpointed steps.
Errors are classified at the edge by ``cairn.outside_errors``: a quota error is
``RetryAfter`` (wait, then call again, without spending an attempt), a 5xx or a
dropped connection is transient, and any other 4xx is ``Permanent``
(PERMISSION_DENIED fails the run at once, with the answer recorded).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx

from cairn import Permanent, Transient, outside_errors

from .settings import LOS_ANGELES

# One client for the process: it is thread-safe, and making one per call
# (which httpx.get does) costs more than the call itself on a local server.
_http = httpx.Client(timeout=10.0)


def raise_for_status(response: httpx.Response) -> None:
    """cairn's error for an error answer, saying what the API said.

    ``cairn.outside_errors`` classifies: 429 is ``RetryAfter`` (honouring
    ``Retry-After``), 5xx ``Transient``, any other 4xx ``Permanent``. The
    message adds the API's own status (``PERMISSION_DENIED``), which is what a
    person reading the failed task needs.
    """
    try:
        outside_errors.raise_for_status(response)
    except (Transient, Permanent) as exc:
        status, message = _error_of(response)
        said = f"{response.request.url.path} answered {response.status_code} {status}: {message}"
        raise type(exc)(said) from exc


def _error_of(response: httpx.Response) -> tuple[str, str]:
    """(gRPC-style status, message) from a JSON error body, if there is one."""
    try:
        error = response.json().get("error", {})
    except ValueError:
        return "", response.text[:200]
    if isinstance(error, dict):
        return str(error.get("status", "")), str(error.get("message", ""))
    return str(error), str(response.json().get("error_description", ""))


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
