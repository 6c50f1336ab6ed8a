"""Error classes: real httpx calls to a real local HTTP server, classified.

Each test sends a real request with httpx to an ``ApiServer`` on 127.0.0.1 told
what to answer, and checks what ``cairn.outside_errors`` makes of the outcome.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import httpx
import pytest

from cairn import Cairn, Context, Permanent, Retry, RetryAfter, TaskFailed, Transient, is_transient
from cairn.clock import FakeClock
from cairn.outside_errors import (
    as_cairn_error,
    classified,
    classify,
    http_class,
    raise_for_status,
    retry_after_seconds,
    status_class,
)
from tests.servers import ApiServer


@pytest.fixture
def api() -> Iterator[ApiServer]:
    with ApiServer() as server:
        yield server


def get(api: ApiServer) -> httpx.Response:
    return httpx.get(f"{api.url}/things", timeout=5)


def test_429_with_retry_after_seconds_becomes_retry_after(api: ApiServer) -> None:
    """A 429 with ``Retry-After: 7`` raises RetryAfter(7), chained from httpx's error."""
    api.answer_next(429, {"Retry-After": "7"})
    with pytest.raises(RetryAfter) as caught:
        raise_for_status(get(api))
    assert caught.value.seconds == 7.0
    assert isinstance(caught.value.__cause__, httpx.HTTPStatusError)
    assert is_transient(caught.value)


def test_429_with_an_http_date_waits_until_then(api: ApiServer) -> None:
    """A ``Retry-After`` given as an HTTP-date is the time left until that date."""
    later = datetime.now(UTC) + timedelta(seconds=120)
    api.answer_next(429, {"Retry-After": format_datetime(later, usegmt=True)})
    with pytest.raises(RetryAfter) as caught:
        raise_for_status(get(api))
    assert 100 < caught.value.seconds <= 120


def test_429_without_a_header_waits_the_default(api: ApiServer) -> None:
    """A bare 429 defers for ``default_retry_after`` seconds."""
    api.answer_next(429)
    with pytest.raises(RetryAfter) as caught:
        raise_for_status(get(api), default_retry_after=2.5)
    assert caught.value.seconds == 2.5


@pytest.mark.parametrize("status", [500, 502, 503, 504, 408])
def test_5xx_and_408_are_transient(api: ApiServer, status: int) -> None:
    """Server errors and request timeouts raise Transient, which is_transient accepts."""
    api.answer_next(status)
    with pytest.raises(Transient) as caught:
        raise_for_status(get(api))
    assert isinstance(caught.value.__cause__, httpx.HTTPStatusError)
    assert is_transient(caught.value)
    assert classify(caught.value.__cause__) == "transient"


def test_503_with_retry_after_is_a_deferral(api: ApiServer) -> None:
    """A 503 that says when to come back is honoured like a 429."""
    api.answer_next(503, {"Retry-After": "3"})
    with pytest.raises(RetryAfter) as caught:
        raise_for_status(get(api))
    assert caught.value.seconds == 3.0


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 422])
def test_other_4xx_are_permanent(api: ApiServer, status: int) -> None:
    """Client errors raise cairn.Permanent with the original as __cause__."""
    api.answer_next(status)
    with pytest.raises(Permanent) as caught:
        raise_for_status(get(api))
    assert isinstance(caught.value.__cause__, httpx.HTTPStatusError)
    assert caught.value.__cause__.response.status_code == status
    assert not is_transient(caught.value)


def test_a_success_is_returned(api: ApiServer) -> None:
    """A 2xx response comes back unchanged."""
    response = get(api)
    assert raise_for_status(response) is response


def test_a_refused_connection_is_transient() -> None:
    """A transport error (nothing listens on the port) becomes Transient."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        with pytest.raises(Transient) as caught, classified():
            httpx.get(f"http://127.0.0.1:{port}/", timeout=2)
    assert isinstance(caught.value.__cause__, httpx.TransportError)


def test_errors_of_unknown_class_pass_through() -> None:
    """classified() leaves an error it cannot classify as it is."""
    with pytest.raises(KeyError), classified():
        raise KeyError("not an outside error")
    assert classify(KeyError("x")) == "unknown"
    assert not is_transient(KeyError("x"))


class RpcError(Exception):
    """Shaped like grpc.RpcError: ``code()`` returns a status with a ``name``."""

    class _Code:
        def __init__(self, name: str) -> None:
            self.name = name

    def __init__(self, status: str) -> None:
        super().__init__(f"rpc failed: {status}")
        self._status = status

    def code(self) -> RpcError._Code:
        return RpcError._Code(self._status)


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("UNAVAILABLE", "transient"),
        ("RESOURCE_EXHAUSTED", "transient"),
        ("DEADLINE_EXCEEDED", "transient"),
        ("ABORTED", "transient"),
        ("PERMISSION_DENIED", "permanent"),
        ("INVALID_ARGUMENT", "permanent"),
        ("NOT_FOUND", "permanent"),
        ("UNAUTHENTICATED", "permanent"),
        ("UNKNOWN", "unknown"),
    ],
)
def test_grpc_status_names(status: str, expected: str) -> None:
    """gRPC-style statuses are classified by name, from ``code()`` or as text."""
    assert status_class(status) == expected
    assert classify(RpcError(status)) == expected


def test_resource_exhausted_becomes_retry_after() -> None:
    """RESOURCE_EXHAUSTED maps to RetryAfter; PERMISSION_DENIED to Permanent."""
    mapped = as_cairn_error(RpcError("RESOURCE_EXHAUSTED"), default_retry_after=4)
    assert isinstance(mapped, RetryAfter)
    assert mapped.seconds == 4
    assert isinstance(as_cairn_error(RpcError("PERMISSION_DENIED")), Permanent)
    assert isinstance(as_cairn_error(RpcError("UNAVAILABLE")), Transient)


def test_http_classes_and_header_parsing() -> None:
    """The HTTP table and the Retry-After parser, at their edges."""
    assert [http_class(s) for s in (200, 301, 400, 408, 429, 499, 500, 599)] == [
        "unknown",
        "unknown",
        "permanent",
        "transient",
        "transient",
        "permanent",
        "transient",
        "transient",
    ]
    assert retry_after_seconds("12") == 12.0
    assert retry_after_seconds("-5") == 0.0
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds(None) is None


def test_retry_on_is_transient_retries_5xx_and_stops_at_4xx(api: ApiServer, tmp_path: Path) -> None:
    """As a step's retry_on, is_transient retries two 503s to success, and fails a
    404 after one call."""
    app = Cairn(f"sqlite:///{tmp_path / 'c.db'}", clock=FakeClock(), task_retry=Retry(attempts=1))
    policy = Retry(attempts=5, retry_on=is_transient)

    def fetch(path: str) -> int:
        return raise_for_status(httpx.get(f"{api.url}/{path}", timeout=5)).status_code

    @app.task
    def job(ctx: Context, path: str) -> int:
        return ctx.step("fetch", fetch, path, retry=policy)

    with app:
        api.answer_next(503, count=2)
        assert app.run(job, path="ok") == 200
        assert len(api.arrivals) == 3
        api.answer_next(404)
        with pytest.raises(TaskFailed, match="Permanent"):
            app.run(job, path="gone")
        assert len(api.arrivals) == 4
