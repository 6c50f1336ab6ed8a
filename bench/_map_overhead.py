"""What one mapped item costs, against a plain step doing the same work.

A task of N plain steps (``ctx.step("s", trivial, i)`` in a loop) is timed
against a task that maps the same function over N items (``ctx.map``), each on
a fresh SQLite file, interleaved, several times. Both commit once per item; the
map adds its head, the per-item names and (with concurrency above 1) threads.
``bench/fanout.py`` prints the table.

Target (from the issue): a mapped item costs at most 1.2x a plain step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from bench._stats import fmt_ratio, median, ratio, spread, table
from cairn import Cairn, Context

MAP_TARGET = 1.2


def trivial(i: int) -> int:
    return i


def plain_steps(ctx: Context, n: int) -> float:
    """The floor: ``n`` plain steps; returns the loop's wall seconds."""
    began = time.perf_counter()
    for i in range(n):
        ctx.step("s", trivial, i)
    return time.perf_counter() - began


def mapped(ctx: Context, n: int, concurrency: int) -> float:
    """The same work as one ``ctx.map``; returns its wall seconds."""
    began = time.perf_counter()
    ctx.map(trivial, range(n), name="s", concurrency=concurrency)
    return time.perf_counter() - began


def _run_plain(path: Path, n: int) -> float:
    with Cairn(f"sqlite:///{path}") as app:
        task = app.task(name="plain")(plain_steps)
        _ = app.store  # open the store before timing
        return float(app.run(task, task_id="plain", n=n))


def _run_mapped(path: Path, n: int, concurrency: int) -> float:
    with Cairn(f"sqlite:///{path}") as app:
        task = app.task(name="mapped")(mapped)
        _ = app.store
        return float(app.run(task, task_id="mapped", n=n, concurrency=concurrency))


@dataclass
class MapResult:
    items: int
    concurrencies: tuple[int, ...]
    plain: list[float] = field(default_factory=list)  # µs per step, per run
    mapped: dict[int, list[float]] = field(default_factory=dict)  # µs per item, per run
    ratios: dict[int, list[float]] = field(default_factory=dict)  # per interleaved pair


def measure_map(workdir: Path, runs: int, items: int, concurrencies: tuple[int, ...]) -> MapResult:
    result = MapResult(items, concurrencies)
    for run in range(runs):
        floor = _run_plain(workdir / f"plain-{run}.db", items) * 1e6 / items
        result.plain.append(floor)
        for concurrency in concurrencies:
            path = workdir / f"map-{concurrency}-{run}.db"
            cost = _run_mapped(path, items, concurrency) * 1e6 / items
            result.mapped.setdefault(concurrency, []).append(cost)
            result.ratios.setdefault(concurrency, []).append(ratio(cost, floor))
    return result


def map_table(result: MapResult) -> str:
    rows = [
        [
            "plain ctx.step (the floor)",
            f"{median(result.plain):.1f}",
            spread(result.plain),
            "1.00x",
            "",
        ]
    ]
    for concurrency in result.concurrencies:
        costs = result.mapped[concurrency]
        verdict = median(result.ratios[concurrency])
        rows.append(
            [
                f"ctx.map item, concurrency={concurrency}",
                f"{median(costs):.1f}",
                spread(costs),
                fmt_ratio(verdict),
                "ok" if verdict <= MAP_TARGET else f"above {MAP_TARGET}x",
            ]
        )
    headers = ["per item", "median µs", "range", "vs step", f"target <= {MAP_TARGET}x"]
    return table(headers, rows)
