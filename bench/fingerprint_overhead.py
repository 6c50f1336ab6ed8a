"""What a step's fingerprint costs: the same step loop with fingerprints and
without, alternating in one process (docs/versions.md).

"Without" empties the cache of fingerprints and replaces
``cairn.engine.steps.fingerprint_of`` by a function that returns None, so no
fingerprint is kept, compared or written: the difference is everything
fingerprints add to a step (the lookup by code object, the comparison on
replay, the extra column in the row). Also timed:
``fingerprint_of`` alone, on a function it has seen.

    .venv/bin/python -m bench.fingerprint_overhead [--pairs 15] [--steps 2000] [--dir DIR]

Target (from the issue): under 2% of a step.
"""

from __future__ import annotations

import argparse
import tempfile
import timeit
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench._stats import filesystem_of, median, table
from bench.step_overhead import cairn_run, replay_run, trivial
from cairn.engine import steps

TARGET_PERCENT = 2.0


@contextmanager
def fingerprints(on: bool) -> Iterator[None]:
    real, cached = steps.fingerprint_of, dict(steps._FINGERPRINTS)
    if not on:
        steps.fingerprint_of = _none  # type: ignore[assignment]
        steps._FINGERPRINTS.clear()
    try:
        yield
    finally:
        steps.fingerprint_of = real
        steps._FINGERPRINTS.update(cached)


def _none(fn: Callable[..., Any]) -> None:
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--dir", type=Path, default=None, help="where the SQLite files go")
    options = parser.parse_args()
    runs: dict[tuple[str, bool], list[float]] = {}
    with tempfile.TemporaryDirectory(dir=options.dir) as folder:
        print(filesystem_of(Path(folder)))
        for pair in range(options.pairs):
            # Which goes first alternates: a pair's first run is not the slower by rule.
            for on in (True, False) if pair % 2 else (False, True):
                with fingerprints(on):
                    first = cairn_run(Path(folder) / f"run-{pair}-{on}.db", "NORMAL", options.steps)
                    again = replay_run(Path(folder) / f"re-{pair}-{on}.db", "NORMAL", options.steps)
                for name, span in (("step", first.loop), ("replayed step", again.loop)):
                    runs.setdefault((name, on), []).append(span.cpu * 1e6 / options.steps)
    rows = []
    for name in ("step", "replayed step"):
        with_, without = median(runs[(name, True)]), median(runs[(name, False)])
        share = 100 * (with_ - without) / with_
        rows.append(
            [name, f"{with_:.2f}", f"{without:.2f}", f"{with_ - without:+.2f}", f"{share:+.1f}%"]
        )
    print(f"{options.pairs} pairs of {options.steps} steps; CPU us per step (median of runs)")
    print(table(["measure", "with", "without", "difference", "share"], rows))
    steps.fingerprint_of(trivial)
    lookup = min(timeit.repeat(lambda: steps.fingerprint_of(trivial), number=100_000, repeat=5))
    print(f"fingerprint_of, cached: {lookup * 1e9 / 100_000:.0f} ns a call")
    print(f"target: under {TARGET_PERCENT:.0f}% of a step")


if __name__ == "__main__":
    main()
