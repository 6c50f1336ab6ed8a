"""How many HTTP requests the spans of a batch take over OTLP/HTTP, live and after
the fact. ``.venv/bin/python -m bench.otel_requests [--tasks 1000] [--dir DIR]``

Runs a batch of ``--tasks`` tasks with two steps each on SQLite with live
tracing (``cairn.observe.live.trace_live``) to a counting OTLP endpoint on
127.0.0.1, then exports the same batch after the fact (``cairn otel-export
--otlp``'s provider). Prints the spans and requests of each.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from cairn import Cairn, Context
from cairn.observe.live import trace_live
from cairn.observe.otel import export_spans, provider_for


class Counter:
    """Requests and spans received."""

    def __init__(self) -> None:
        self.requests = 0
        self.spans = 0
        self.lock = threading.Lock()

    def add(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        spans = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
        with self.lock:
            self.requests += 1
            self.spans += spans


def serve(counter: Counter) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            counter.add(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, fmt: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.otel_requests")
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        app = Cairn(f"sqlite:///{Path(scratch) / 'spans.db'}")

        @app.task(name="work")
        def work(ctx: Context, n: int) -> int:
            ctx.step("fetch", lambda: n)
            return int(ctx.step(f"score-{n}", lambda: n * 2))

        for label in ("live", "after the fact"):
            counter = Counter()
            server = serve(counter)
            url = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
            began = time.perf_counter()
            if label == "live":
                provider = trace_live(app, endpoint=url, service="bench")
                items = [{"n": n} for n in range(args.tasks)]
                app.run_batch("bench-1", work, items, concurrency=4, progress=False)
            else:
                provider = provider_for(OTLPSpanExporter(endpoint=url), "bench")
                export_spans(app.store, provider, batch="bench-1")
            provider.shutdown()
            seconds = time.perf_counter() - began
            server.shutdown()
            print(
                f"{label}: {args.tasks} tasks, {counter.spans} spans in {counter.requests} "
                f"HTTP requests ({seconds:.1f} s including the run)"
            )
        app.close()


if __name__ == "__main__":
    main()
