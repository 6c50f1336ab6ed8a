"""An OpenTelemetry collector's trace endpoint for the tests: OTLP/HTTP on
127.0.0.1, decoding each POST as the protobuf ``ExportTraceServiceRequest``
(opentelemetry-proto), recording the spans of each request as they arrive."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class Received:
    """One decoded span, with the resource it came from."""

    service: str
    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes
    name: str
    attributes: dict[str, Any]
    links: list[tuple[bytes, bytes]]


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


def decode(body: bytes) -> list[Received]:
    """The spans of one ExportTraceServiceRequest."""
    request = ExportTraceServiceRequest.FromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    Received(
                        str(resource.get("service.name")),
                        span.trace_id,
                        span.span_id,
                        span.parent_span_id,
                        span.name,
                        {a.key: _value(a.value) for a in span.attributes},
                        [(link.trace_id, link.span_id) for link in span.links],
                    )
                )
    return spans


@dataclass
class OtlpReceiver:
    """``with OtlpReceiver() as otlp:`` then export to ``otlp.url``."""

    requests: list[list[Received]] = field(default_factory=list)
    # Each request's body as it arrived (a search for a text in every span).
    bodies: list[bytes] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _arrived: threading.Condition = field(init=False)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        self._arrived = threading.Condition(self._lock)

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1/traces"

    @property
    def spans(self) -> list[Received]:
        with self._lock:
            return [span for request in self.requests for span in request]

    def wait_for_requests(self, count: int, timeout: float) -> bool:
        """Block until ``count`` requests have arrived (False after ``timeout`` s)."""
        with self._arrived:
            return self._arrived.wait_for(lambda: len(self.requests) >= count, timeout)

    def _record(self, body: bytes) -> None:
        spans = decode(body)
        with self._arrived:
            self.bodies.append(body)
            self.requests.append(spans)
            self._arrived.notify_all()

    def __enter__(self) -> Self:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                receiver._record(body)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(HTTPStatus.OK)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, fmt: str, *args: Any) -> None:
                pass  # quiet

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._server is not None
        assert self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
