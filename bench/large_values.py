"""Checkpoint time and store size for large step outputs, with and without offload.

For each size (1 KB, 1 MB, 50 MB by default) a task records STEPS steps, each
returning a string of that size, on a fresh SQLite file (synchronous=NORMAL):

- inline: ``inline_limit`` above the size, so the value is written into the row;
- offload: the default 64 KiB limit, so the value goes to the file blob store
  (written and fsynced) and the row holds a ~150-byte reference.

Reported per step: the median wall time of a checkpoint over RUNS runs, the
floor (writing the same bytes to a file and fsyncing it, the least any durable
checkpoint can cost), the ratio to that floor, the SQLite file's size after the
run (WAL checkpointed) and the blob directory's size. Then the replay time of
the same steps (loading the history and decoding every value: for offload,
reading the blob and checking its sha256).

    .venv/bin/python -m bench.large_values [--runs 3] [--steps 5] [--sizes 1000,1000000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from bench._stats import filesystem_of, fmt_ratio, median, ratio, table
from cairn import Cairn, Context

SIZES = (1_000, 1_000_000, 50_000_000)


def _dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def _floor(root: Path, size: int, steps: int) -> float:
    data = b"x" * size
    start = time.perf_counter()
    for i in range(steps):
        with (root / f"floor-{i}").open("wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    return (time.perf_counter() - start) / steps


def _one(root: Path, size: int, steps: int, offload: bool) -> tuple[float, float, int, int]:
    db = root / "cairn.db"
    limit = 64 * 1024 if offload else size * 2
    value = "v" * (size - 2)  # JSON adds the two quotes
    with Cairn(f"sqlite:///{db}", inline_limit=limit) as app:

        @app.task
        def many(ctx: Context) -> int:
            for i in range(steps):
                ctx.step(f"s{i}", lambda: value)
            return steps

        start = time.perf_counter()
        app.run(many, task_id="t")
        wrote = (time.perf_counter() - start) / steps
    with Cairn(f"sqlite:///{db}", inline_limit=limit) as app:
        # What a resumed run does per step: load the record, decode (read, hash) it.
        codec = app.codec_named("json")
        start = time.perf_counter()
        for record in app.store.load_history("t").values():
            codec.decode(record.output or "null")
        replayed = (time.perf_counter() - start) / steps
        app.store._exec("PRAGMA wal_checkpoint(TRUNCATE)")  # type: ignore[attr-defined]
    return wrote, replayed, db.stat().st_size, _dir_size(Path(f"{db}-blobs"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    base = Path(args.dir or tempfile.gettempdir())
    print(f"files on {filesystem_of(base)}; {args.steps} steps a run, {args.runs} runs")
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        for offload in (False, True):
            wrote, replayed, floors, dbs, blobs = [], [], [], [], []
            for _ in range(args.runs):
                root = Path(tempfile.mkdtemp(dir=base))
                try:
                    floors.append(_floor(root, size, args.steps))
                    w, r, d, b = _one(root, size, args.steps, offload)
                finally:
                    shutil.rmtree(root)
                wrote.append(w)
                replayed.append(r)
                dbs.append(d)
                blobs.append(b)
            rows.append(
                [
                    f"{size:,} B",
                    "offload" if offload else "inline",
                    f"{median(wrote) * 1e3:.2f}",
                    f"{median(floors) * 1e3:.2f}",
                    fmt_ratio(ratio(median(wrote), median(floors))),
                    f"{median(replayed) * 1e3:.2f}",
                    f"{median(dbs) / 1e6:.2f}",
                    f"{median(blobs) / 1e6:.2f}",
                ]
            )
    headers = ["value", "mode", "write ms", "floor ms", "ratio", "replay ms", "db MB", "blobs MB"]
    print(table(headers, rows))


if __name__ == "__main__":
    main()
