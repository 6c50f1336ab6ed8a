"""Errors of outside services: which may go away if tried again, and which never will.

cairn retries what a ``Retry`` policy lets it. Outside services say in their own
words whether trying again can help; this module reads them:

* **transient** (may work later): HTTP 5xx, 408 and 429; gRPC ``UNAVAILABLE``,
  ``RESOURCE_EXHAUSTED``, ``DEADLINE_EXCEEDED``, ``ABORTED``, ``INTERNAL``; a
  dropped connection or a timeout (``ConnectionError``, ``TimeoutError``, httpx
  transport errors); ``cairn.Transient`` and ``cairn.RetryAfter``.
* **permanent** (the request itself is wrong): other HTTP 4xx; gRPC
  ``INVALID_ARGUMENT``, ``NOT_FOUND``, ``ALREADY_EXISTS``, ``PERMISSION_DENIED``,
  ``UNAUTHENTICATED``, ``FAILED_PRECONDITION``, ``OUT_OF_RANGE``,
  ``UNIMPLEMENTED``, ``CANCELLED``, ``DATA_LOSS``; ``cairn.Permanent``.
* **unknown**: anything else (a ``ValueError`` from your own code, gRPC ``UNKNOWN``).

Use ``is_transient`` as ``Retry(retry_on=is_transient)``, or turn outside errors
into cairn's own with ``classified()`` / ``as_cairn_error`` (429 and
``RESOURCE_EXHAUSTED`` become ``RetryAfter``, which waits without spending an
attempt). ``raise_for_status(response)`` does it for an httpx response. httpx is
never imported here: its errors are recognised only if the program loaded it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Literal, Protocol, TypeVar

from cairn.errors import Permanent, RetryAfter, Transient

ErrorClass = Literal["transient", "permanent", "unknown"]


class _Response(Protocol):
    def raise_for_status(self) -> Any: ...


R = TypeVar("R", bound=_Response)

TRANSIENT_STATUSES = frozenset(
    {"UNAVAILABLE", "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED", "ABORTED", "INTERNAL"}
)
PERMANENT_STATUSES = frozenset(
    {
        "INVALID_ARGUMENT",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "UNAUTHENTICATED",
        "FAILED_PRECONDITION",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "CANCELLED",
        "DATA_LOSS",
    }
)
# Statuses that mean "you asked too often": waited out as RetryAfter.
_THROTTLED_HTTP = 429
_THROTTLED_STATUS = "RESOURCE_EXHAUSTED"
DEFAULT_RETRY_AFTER = 1.0


def status_class(name: str) -> ErrorClass:
    """The class of a gRPC-style status name (``"UNAVAILABLE"``, ``"NOT_FOUND"``...)."""
    upper = name.upper()
    if upper in TRANSIENT_STATUSES:
        return "transient"
    if upper in PERMANENT_STATUSES:
        return "permanent"
    return "unknown"


def http_class(status: int) -> ErrorClass:
    """The class of an HTTP status: 5xx, 408 and 429 transient, other 4xx permanent."""
    if status >= 500 or status in (408, _THROTTLED_HTTP):
        return "transient"
    if 400 <= status < 500:
        return "permanent"
    return "unknown"


def http_status_of(error: BaseException) -> int | None:
    """The HTTP status an error carries: ``error.response.status_code`` (httpx,
    requests, the openai and anthropic clients) or ``error.status_code``."""
    for holder in (getattr(error, "response", None), error):
        status = getattr(holder, "status_code", None)
        if isinstance(status, int) and not isinstance(status, bool):
            return status
    return None


def status_name_of(error: BaseException) -> str | None:
    """The gRPC status name an error carries: ``error.code()`` (grpc.RpcError),
    ``error.grpc_status_code`` (google.api_core) or a status-name ``error.code``."""
    code: Any = getattr(error, "grpc_status_code", None)
    if code is None:
        code = getattr(error, "code", None)
        if callable(code):
            try:
                code = code()
            except Exception:  # noqa: BLE001 - a code() that needs arguments is not gRPC's
                return None
    name = getattr(code, "name", code)
    if isinstance(name, str) and (name in TRANSIENT_STATUSES or name in PERMANENT_STATUSES):
        return name
    return None


def _transport_error(error: BaseException) -> bool:
    if isinstance(error, ConnectionError | TimeoutError):
        return True
    # httpx, and httpx2 under the newer model SDKs: whichever the program loaded.
    for name in ("httpx", "httpx2"):
        library = sys.modules.get(name)
        if library is not None and isinstance(error, library.TransportError):
            return True
    return False


def _own_class(error: BaseException) -> ErrorClass:
    """The class ``error`` itself says it has (not looking at what it wraps)."""
    if isinstance(error, RetryAfter | Transient):
        return "transient"
    if isinstance(error, Permanent):
        return "permanent"
    status = http_status_of(error)
    if status is not None:
        return http_class(status)
    name = status_name_of(error)
    if name is not None:
        return status_class(name)
    if _transport_error(error):
        return "transient"
    return "unknown"


def classify(error: BaseException) -> ErrorClass:
    """``"transient"``, ``"permanent"`` or ``"unknown"``: the first error along the
    ``__cause__`` chain that says which decides."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        found = _own_class(current)
        if found != "unknown":
            return found
        seen.add(id(current))
        current = current.__cause__
    return "unknown"


def is_transient(error: BaseException) -> bool:
    """True if trying again later may succeed; use it as ``Retry(retry_on=is_transient)``."""
    return classify(error) == "transient"


def retry_after_seconds(value: str | None, *, now: datetime | None = None) -> float | None:
    """A ``Retry-After`` header's wait in seconds: delta-seconds or an HTTP-date
    (RFC 9110). None if it is missing or unreadable."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if seconds != seconds:  # NaN
        return None
    return max(0.0, seconds)


def _header(error: BaseException, name: str) -> str | None:
    headers = getattr(getattr(error, "response", None), "headers", None)
    if headers is None:
        return None
    try:
        found = headers.get(name)
    except Exception:  # noqa: BLE001 - an odd headers object: no header
        return None
    return found if isinstance(found, str) else None


def as_cairn_error(
    error: BaseException, *, default_retry_after: float = DEFAULT_RETRY_AFTER
) -> BaseException:
    """The cairn error that stands for ``error`` (raise it ``from error``):

    * ``RetryAfter`` for HTTP 429, a 503 with a ``Retry-After`` header, or gRPC
      ``RESOURCE_EXHAUSTED``: ``Retry-After`` is honoured, else
      ``default_retry_after`` seconds;
    * ``Transient`` for other transient errors, ``Permanent`` for permanent ones;
    * ``error`` itself when its class is unknown or it already is cairn's.
    """
    if isinstance(error, RetryAfter | Transient | Permanent):
        return error
    status = http_status_of(error)
    asked = retry_after_seconds(_header(error, "Retry-After"))
    if status == _THROTTLED_HTTP or (status == 503 and asked is not None):
        wait = default_retry_after if asked is None else asked
        return RetryAfter(wait, f"HTTP {status}: asked to retry after {wait:g}s ({error})")
    if status is None and status_name_of(error) == _THROTTLED_STATUS:
        return RetryAfter(default_retry_after, f"{_THROTTLED_STATUS}: {error}")
    found = classify(error)
    described = f"{type(error).__name__}: {error}"
    if found == "transient":
        return Transient(described)
    if found == "permanent":
        return Permanent(described)
    return error


@contextmanager
def classified(*, default_retry_after: float = DEFAULT_RETRY_AFTER) -> Iterator[None]:
    """Re-raise outside errors inside the block as cairn's own (``as_cairn_error``),
    chained ``from`` the original; errors of unknown class pass through as they are."""
    try:
        yield
    except Exception as exc:
        mapped = as_cairn_error(exc, default_retry_after=default_retry_after)
        if mapped is exc:
            raise
        raise mapped from exc


def raise_for_status(response: R, *, default_retry_after: float = DEFAULT_RETRY_AFTER) -> R:
    """httpx's ``response.raise_for_status()``, raising cairn's classes: ``RetryAfter``
    for 429 (honouring ``Retry-After`` in seconds or as an HTTP-date), ``Transient``
    for 5xx and 408, ``Permanent`` for other 4xx, each ``from`` httpx's error.
    Returns the response when it succeeded."""
    with classified(default_retry_after=default_retry_after):
        response.raise_for_status()
    return response
