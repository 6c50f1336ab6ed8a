"""Side by side (3) and (4): cairn-only measures the peers' comparison sits next to.

(3) Resume latency. (a) A batch with many finished tasks: ``bench.batch_scale``'s
    resume measure (ten new items enqueued, then the ``run_batch`` that runs only
    them), a batch of N finished tasks against one of N/100 (the floor), rounds
    alternating. (b) Resuming one crashed task of S steps (``bench.step_overhead``'s
    replay: every step returns its recorded output), per step, against the raw
    commit floor of the same round.
(4) Workers on PostgreSQL: ``bench.postgres``'s drain of T tasks x 5 steps by 1, 2
    and 4 ``cairn worker`` processes, each count on a fresh schema.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from bench import batch_scale, step_overhead
from bench._stats import fmt_ratio, median, ratio, spread, table


def make_batch(path: Path, tasks: int) -> float:
    """A batch of ``tasks`` finished one-step tasks in ``path``; its seconds."""
    app, task = batch_scale.open_app(path)
    try:
        start = time.perf_counter()
        report = app.run_batch(batch_scale.BATCH, task, batch_scale.items(0, tasks), progress=False)
        if report.completed != tasks:
            raise SystemExit(f"expected {tasks} completed tasks, got {report.counts}")
        return time.perf_counter() - start
    finally:
        app.close()


def resume_batches(workdir: Path, finished: int, runs: int) -> str:
    small = max(1, finished // 100)
    make_batch(workdir / "resume-a.db", finished)
    make_batch(workdir / "resume-b.db", small)
    found = batch_scale.measure_resume(
        workdir / "resume-a.db", finished, workdir / "resume-b.db", small, runs
    )
    return "(3a) " + found.removeprefix("(b) ")


def resume_task(workdir: Path, steps: int, runs: int) -> str:
    floor, replayed = [], []
    for round_ in range(runs):
        raw = step_overhead.raw_commits(workdir / f"raw-{round_}.db", "NORMAL", steps)
        floor.append(raw.wall * 1e6 / steps)
        timing = step_overhead.replay_run(workdir / f"replay-{round_}.db", "NORMAL", steps)
        replayed.append(timing.whole.wall * 1e6 / steps)
    paired = median([ratio(r, f) for r, f in zip(replayed, floor, strict=True)])
    rows = [
        ["raw commit WAL/NORMAL (floor)", f"{median(floor):.1f}", spread(floor), ""],
        [
            "cairn resumed task, per step",
            f"{median(replayed):.1f}",
            spread(replayed),
            fmt_ratio(paired),
        ],
    ]
    return (
        f"(3b) resuming a crashed task of {steps} recorded steps (whole app.run), "
        f"{runs} interleaved rounds\n"
        f"{table(['measure', 'us/step', 'min..max', 'vs floor'], rows)}\n"
    )


def workers(postgres_url: str, tasks: int, counts: Sequence[int], runs: int) -> str:
    from bench import postgres
    from bench.side_steps import scratch_database

    concurrency = 2
    with scratch_database(postgres_url, "workers") as url:
        found = postgres.measure_workers(url, tasks, counts, concurrency, runs)
    return "(4) " + postgres.report_workers(found, tasks, concurrency, runs).removeprefix("(b) ")
