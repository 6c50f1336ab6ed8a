"""How long does a dashboard page take to answer with 100,000 tasks in the store?

The store is filled as in ``bench.admin_pages`` (``--tasks`` tasks over
``--batches`` batches, a thousand of cairn's own tasks last), then a task with a
conversation and three ``cairn fidelity`` runs on it (their probe tasks, named
as the command names them), whose page looks those runs up. ``cairn ui``'s
server (uvicorn, the guard middleware, Jinja2 rendering) runs in a thread;
each page is fetched over HTTP on 127.0.0.1 ``--runs`` times, and the median
and slowest answer are printed in milliseconds against the target of 100 ms
(the target the list, search and metrics pages are held to at 100,000 tasks).
"Live refresh, unchanged" is a live region's poll when nothing changed (204).

    .venv/bin/python -m bench.dashboard_pages [--tasks 100000] [--batches 310]
        [--runs 7] [--dir DIR] [--url postgresql://…/postgres]
"""

from __future__ import annotations

import argparse
import http.client
import re
import tempfile
import time
from collections.abc import Sequence
from datetime import timedelta
from html import unescape
from pathlib import Path
from urllib.parse import quote

from bench._stats import filesystem_of, median, table
from bench.admin_pages import ALERTS, INSERT, START, fill, postgres_store
from cairn import Cairn, Context
from cairn.admin import FIDELITY_TASK, fidelity_task_id
from cairn.store import open_store
from cairn.store.sqlbase import SQLStore
from cairn.ui.server import DashboardServer, UIConfig, serve_in_thread

Page = tuple[str, str, dict[str, str]]
AGENT = "agent/1"
PAGE_TARGET_MS = 100.0
FIDELITY_RUNS = 3


def add_fidelity_runs(store: SQLStore) -> None:
    """A task with a conversation (run by cairn), and ``FIDELITY_RUNS`` probe
    tasks of ``cairn fidelity`` runs on it, enqueued after every other task."""
    with Cairn(store.url) as app:

        @app.task(name="agent")
        def agent(ctx: Context) -> None:
            ctx.conversation("main").append({"role": "user", "content": "review the ad settings"})

        app.run(agent, task_id=AGENT)
    stamp = store._ts(START + timedelta(days=1))
    done = ("{}", "json", "completed", None, stamp, stamp, stamp, stamp)
    ids = [
        fidelity_task_id(AGENT, "main", f"2026052{n}T000000.000000Z") for n in range(FIDELITY_RUNS)
    ]
    probes = [(probe, None, None, FIDELITY_TASK, *done) for probe in ids]
    store._atomically(lambda tx: tx.exec_many(INSERT, probes))


def _get(port: int, path: str, headers: dict[str, str]) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers={"Host": f"127.0.0.1:{port}", **headers})
        answer = conn.getresponse()
        return answer.status, answer.read().decode()
    finally:
        conn.close()


def pages(port: int) -> list[Page]:
    """The pages to time: found by following the dashboard's own links."""
    _, first = _get(port, "/tasks", {})
    older = unescape(re.findall(r'href="(/tasks\?older=[^"]+)"', first)[0])
    _, deep = _get(port, older, {})
    newer = unescape(re.findall(r'href="(/tasks\?newer=[^"]+)"', deep)[0])
    _, live = _get(port, "/", {})
    seen = re.findall(r'data-seen="([0-9a-f]+)"', live)[0]
    poll = {"HX-Request": "true", "X-Cairn-Seen": seen}
    _, chart = _get(port, "/metrics", {})
    metrics_older = unescape(re.findall(r'href="/metrics\?older=([^"]+)"', chart)[0])
    return [
        ("batches", "/", {}),
        ("live refresh, unchanged (204)", "/", poll),
        ("tasks, newest", "/tasks", {}),
        ("tasks, older page", older, {}),
        ("tasks, newer page", newer, {}),
        ("tasks, failed", "/tasks?status=failed", {}),
        ("tasks, one batch", "/tasks?batch=batch-120", {}),
        ("tasks, search error text", "/tasks?q=" + quote("after 42s"), {}),
        ("tasks, search an id", "/tasks?q=" + quote("batch-007/item=700"), {}),
        ("tasks, search part of an id", "/tasks?q=" + quote("item=7001"), {}),
        ("tasks, search a name", "/tasks?q=" + quote("REVIEW"), {}),
        ("tasks, search no match", "/tasks?q=" + quote("no such text anywhere"), {}),
        ("tasks, failed of a batch (grouped)", "/tasks?batch=batch-120&status=failed", {}),
        ("tasks, since", "/tasks?since=" + quote((START + timedelta(hours=12)).isoformat()), {}),
        ("batch", "/batch?name=batch-120", {}),
        ("task", "/task?id=" + quote("batch-120/item=120", safe=""), {}),
        (f"task with {FIDELITY_RUNS} fidelity runs", "/task?id=" + quote(AGENT, safe=""), {}),
        ("operations", "/ops", {}),
        ("stalls", "/stalls", {}),
        ("metrics", "/metrics", {}),
        ("metrics, older batches", "/metrics?older=" + metrics_older, {}),
        ("metrics of one batch", "/metrics?batch=batch-120", {}),
    ]


def measure(store: SQLStore, runs: int) -> list[list[str]]:
    config = UIConfig(store, lambda: START + timedelta(days=2))
    server = DashboardServer(("127.0.0.1", 0), config)
    thread = serve_in_thread(server)
    port = int(server.server_address[1])
    rows = []
    try:
        for label, path, headers in pages(port):
            times = []
            for _ in range(runs):
                started = time.perf_counter()
                status, _ = _get(port, path, headers)
                times.append((time.perf_counter() - started) * 1000)
                assert status in (200, 204), (label, status)
            worst = max(times)
            verdict = "ok" if worst < PAGE_TARGET_MS else "OVER"
            rows.append([label, f"{median(times):.1f}", f"{worst:.1f}", verdict])
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    return rows


def report(title: str, rows: list[list[str]]) -> None:
    print(f"\n{title}")
    print(table(["page (HTTP)", "ms (median)", "ms (slowest)", f"< {PAGE_TARGET_MS:.0f} ms"], rows))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=310)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--url", default=None, help="a PostgreSQL server to measure too")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_args(argv)
    shape = f"{options.tasks:,} tasks in {options.batches} batches and {ALERTS:,} of cairn's own"
    with tempfile.TemporaryDirectory(dir=options.dir) as scratch:
        folder = Path(scratch)
        print(f"SQLite file on {filesystem_of(folder)}")
        store = open_store(f"sqlite:///{folder / 'dashboard.db'}")
        assert isinstance(store, SQLStore)
        try:
            fill(store, options.tasks, options.batches)
            add_fidelity_runs(store)
            report(f"SQLite, {shape}", measure(store, options.runs))
        finally:
            store.close()
    if options.url:
        with postgres_store(options.url) as pg:
            fill(pg, options.tasks, options.batches)
            add_fidelity_runs(pg)
            report(f"PostgreSQL, {shape}", measure(pg, options.runs))


if __name__ == "__main__":
    main()
