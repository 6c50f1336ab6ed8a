"""Fan-out: what a mapped item costs, and how exactly a shared rate limit holds.

**Per-item overhead of ``ctx.map``** (bench/_map_overhead.py): a task of N plain
steps against a task mapping the same function over N items, each on a fresh
SQLite file, interleaved; the ratio is taken per pair and its median printed.
Target: a mapped item costs at most 1.2x a plain step.

**Rate-limiter accuracy.** A batch of tasks, each one step that POSTs to a small
HTTP server on 127.0.0.1 under ``limit="api"`` with ``Rate(count, per)``, run by
``run_batch`` with many threads. The server logs each request's arrival by its
own clock. Reported, as medians over several runs:

* the busiest window: the most requests any sliding window of ``per`` seconds of
  the server's log holds, against ``count`` (above 1.00x would be a broken limit);
* the typical fill: the median count of the windows that start at each request
  (and end before the last one), against ``count``: how much of the allowed rate
  the limiter lets through. A permit counts from its grant until ``per`` after
  its call *ends* (that is what keeps the busiest window exact), so calls that
  take time leave some of the rate unused.

    .venv/bin/python -m bench.fanout [--runs 3] [--calls 120] [--threads 8]
        [--count 20] [--per 1.0] [--store URL] [--dir DIR]
        [--items 2000] [--only map|rate]

Each part is a function returning numbers plus a ``report_*`` printing them.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench._map_overhead import map_table, measure_map
from bench._stats import filesystem_of, fmt_ratio, median, ratio, spread, table
from cairn import Cairn, Context, Rate
from cairn.retry import NO_RETRY


# -- the outside API: a real HTTP server that logs arrivals -----------------------------
class _LoggingServer(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.arrivals: list[float] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    server: _LoggingServer

    def do_POST(self) -> None:
        with self.server.lock:
            self.server.arrivals.append(time.monotonic())
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
        """Quiet."""


def _post(url: str) -> int:
    request = urllib.request.Request(url, data=b"{}", method="POST")  # noqa: S310 - our server
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - our server
        return int(response.status)


# -- windows --------------------------------------------------------------------------------
def window_counts(times: Sequence[float], per: float) -> list[int]:
    """For each arrival, how many arrivals fall in ``[it, it + per)``: the busiest
    sliding window always starts at an arrival, so its max is the busiest of all."""
    ordered = sorted(times)
    counts, end = [], 0
    for start, first in enumerate(ordered):
        while end < len(ordered) and ordered[end] < first + per:
            end += 1
        counts.append(end - start)
    return counts


def full_window_counts(times: Sequence[float], per: float) -> list[int]:
    """``window_counts`` for the windows that end before the last arrival (a window
    running past the end of the run is not full, and would read low)."""
    ordered = sorted(times)
    if not ordered:
        return []
    last = ordered[-1]
    counts = window_counts(ordered, per)
    return [n for t, n in zip(ordered, counts, strict=True) if t + per <= last]


# -- rate-limiter accuracy ------------------------------------------------------------------
@dataclass(frozen=True)
class RateRun:
    busiest: int
    typical: float
    seconds: float


def rate_run(store_url: str, rate: Rate, calls: int, threads: int) -> RateRun:
    """One batch of ``calls`` limited POSTs over ``threads`` threads (a new batch
    each time, so runs may share a store)."""
    batch = f"fanout-{uuid.uuid4().hex[:8]}"
    server = _LoggingServer()
    serving = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02})
    serving.start()
    app = Cairn(store_url, limits={"api": rate}, task_retry=NO_RETRY)

    @app.task
    def call(ctx: Context, n: int) -> int:
        return ctx.step("post", _post, f"{server.url}/call/{n}", limit="api")

    try:
        started = time.monotonic()
        report = app.run_batch(
            batch, call, [{"n": n} for n in range(calls)], concurrency=threads, progress=False
        )
        seconds = time.monotonic() - started
    finally:
        app.close()
        server.shutdown()
        server.server_close()
        serving.join()
    if report.completed != calls:
        raise RuntimeError(f"only {report.completed} of {calls} calls completed")
    full = full_window_counts(server.arrivals, rate.per) or [0]
    return RateRun(max(window_counts(server.arrivals, rate.per)), median(full), seconds)


@dataclass
class RateAccuracy:
    rate: Rate
    calls: int
    threads: int
    store: str
    runs: list[RateRun] = field(default_factory=list)


def rate_accuracy(
    rate: Rate, *, calls: int, threads: int, runs: int, store: str | None, workdir: Path
) -> RateAccuracy:
    """``runs`` runs of ``rate_run``, each on a fresh store (SQLite in ``workdir``
    unless ``store`` names one, which is then shared by the runs)."""
    result = RateAccuracy(rate, calls, threads, store or f"SQLite in {filesystem_of(workdir)}")
    for run in range(runs):
        url = store or f"sqlite:///{workdir / f'fanout-{run}.db'}"
        result.runs.append(rate_run(url, rate, calls, threads))
    return result


def report_rate(result: RateAccuracy) -> str:
    rate = result.rate
    busiest = [float(r.busiest) for r in result.runs]
    typical = [r.typical for r in result.runs]
    seconds = [r.seconds for r in result.runs]
    rows = [
        [
            f"busiest {rate.per:g}s window",
            f"{median(busiest):.0f}",
            spread(busiest),
            fmt_ratio(ratio(median(busiest), rate.count)),
        ],
        [
            f"typical {rate.per:g}s window",
            f"{median(typical):.1f}",
            spread(typical),
            fmt_ratio(ratio(median(typical), rate.count)),
        ],
        ["whole batch (s)", f"{median(seconds):.2f}", spread(seconds), ""],
    ]
    head = (
        f"rate-limiter accuracy: {rate!r}, {result.calls} calls over {result.threads} "
        f"threads, {len(result.runs)} runs, store: {result.store}\n"
        "requests per window as the HTTP server on 127.0.0.1 logged them; "
        "vs configured = median / count (busiest must stay <= 1.00x)"
    )
    return head + "\n" + table(["measure", "median", "min..max", "vs configured"], rows)


# -- the program ----------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.fanout", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--calls", type=int, default=120)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--count", type=int, default=20, help="the Rate's count")
    parser.add_argument("--per", type=float, default=1.0, help="the Rate's window, seconds")
    parser.add_argument("--store", help="a store URL (default: a fresh SQLite file per run)")
    parser.add_argument("--dir", type=Path, help="where the SQLite files go")
    parser.add_argument("--items", type=int, default=2000, help="items per map (overhead)")
    parser.add_argument("--only", choices=("map", "rate"), help="run one part only")
    args = parser.parse_args(argv)
    if args.only != "rate":
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            overhead = measure_map(Path(tmp), max(args.runs, 5), args.items, (1, 4))
        print(f"ctx.map per-item overhead ({args.items} items, SQLite, NORMAL)")
        print(map_table(overhead))
        print()
    if args.only == "map":
        return
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        result = rate_accuracy(
            Rate(args.count, per=args.per),
            calls=args.calls,
            threads=args.threads,
            runs=args.runs,
            store=args.store,
            workdir=Path(tmp),
        )
    print(report_rate(result))


if __name__ == "__main__":
    main()
