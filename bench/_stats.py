"""Small helpers shared by the benchmarks: medians, ratios, a plain text table."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path


def median(values: Sequence[float]) -> float:
    """The median, which a few noisy runs on a shared machine move least."""
    return statistics.median(values)


def spread(values: Sequence[float]) -> str:
    """``min..max`` of the runs, so a reader sees how noisy the median is."""
    return f"{min(values):.1f}..{max(values):.1f}"


def ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator``; infinite when the floor measured zero."""
    return numerator / denominator if denominator else float("inf")


def fmt_ratio(value: float) -> str:
    return f"{value:.2f}x"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned first column, right-aligned numbers, one header rule."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest]).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(row) for row in rows)])


def filesystem_of(path: Path) -> str:
    """The type and mount point of the filesystem holding ``path``: fsync costs
    differ wildly between ext4 and tmpfs, so the numbers mean little without it."""
    target = str(path.resolve())
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return "unknown filesystem"
    point, kind = "", "unknown"
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        inside = target == fields[1] or target.startswith(fields[1].rstrip("/") + "/")
        # The longest mount point that contains the path is the one it lives on.
        if inside and len(fields[1]) >= len(point):
            point, kind = fields[1], fields[2]
    return f"{kind} mounted at {point or '?'}"
