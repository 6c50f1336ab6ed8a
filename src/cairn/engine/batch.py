"""Running a batch: claim tasks one at a time, run up to N at once, until done.

Tasks are claimed one by one from the store, never loaded as a whole batch, so
memory stays flat for any batch size and resuming costs nothing per finished
task (the claim reads only pending and running rows through an index).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cairn.engine.claim import WAIT, Claimer
from cairn.engine.execute import Outcome, aexecute, execute
from cairn.engine.observer import tell
from cairn.progress import Progress
from cairn.store.records import FINISHED_STATUSES, TaskRecord

if TYPE_CHECKING:
    from cairn.engine.config import EngineConfig


@dataclass(frozen=True, slots=True)
class Failure:
    """A task of the batch that ended failed in this run."""

    task_id: str
    error_type: str
    message: str


@dataclass
class BatchReport:
    """What one ``run_batch`` call did, and where the batch stands after it."""

    batch: str
    # The batch's tasks: at the start, then (once the run ended) at the end,
    # with the children its tasks spawned.
    total: int
    skipped: int
    ran: int = 0
    resumed: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    elapsed_seconds: float = 0.0

    @property
    def completed(self) -> int:
        return self.counts.get("completed", 0)

    @property
    def failed(self) -> int:
        return self.counts.get("failed", 0)

    @property
    def cancelled(self) -> int:
        return self.counts.get("cancelled", 0)

    @property
    def ok(self) -> bool:
        """True when every task of the batch completed."""
        return self.completed == self.total


class _Tally:
    """Collects outcomes from many threads or coroutines."""

    def __init__(self, progress: Progress) -> None:
        self._lock = threading.Lock()
        self._progress = progress
        self.ran = 0
        self.resumed = 0
        self.failures: list[Failure] = []

    def started(self, task: TaskRecord) -> None:
        self._progress.task_started(task.id)

    def add(self, outcome: Outcome) -> None:
        with self._lock:
            self.ran += 1
            self.resumed += outcome.resumed
            if outcome.status == "failed" and outcome.error is not None:
                kind = type(outcome.error)
                self.failures.append(
                    Failure(
                        outcome.task_id,
                        f"{kind.__module__}.{kind.__qualname__}",
                        str(outcome.error),
                    )
                )
        self._progress.task_finished(outcome)


def run_sync(engine: EngineConfig, batch: str, concurrency: int, progress: Progress) -> BatchReport:
    """Run the batch's tasks on ``concurrency`` threads of this process."""
    report, tally, claimer = _begin(engine, batch, progress)
    stop = threading.Event()
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            _work()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
            errors.append(exc)
            stop.set()
        finally:
            engine.store.close_thread()

    def _work() -> None:
        while not stop.is_set():
            task = claimer.next()
            if task is None:
                return
            if task == WAIT:
                engine.clock.sleep(engine.poll_interval)
                continue
            tally.started(task)
            tally.add(execute(engine, task))

    # Daemon threads: if the process is interrupted, its tasks stay "running"
    # under a dead pid and the next run reclaims them at once.
    threads = [
        threading.Thread(target=worker, name=f"cairn-worker-{i}", daemon=True)
        for i in range(concurrency)
    ]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)
    except BaseException:
        stop.set()
        raise
    if errors:
        raise errors[0]
    return _end(engine, report, tally, progress)


async def run_async(
    engine: EngineConfig, batch: str, concurrency: int, progress: Progress
) -> BatchReport:
    """Run the batch's async tasks as ``concurrency`` coroutines."""
    report, tally, claimer = _begin(engine, batch, progress)

    async def worker() -> None:
        while True:
            task = claimer.next()
            if task is None:
                return
            if task == WAIT:
                await engine.clock.asleep(engine.poll_interval)
                continue
            tally.started(task)
            tally.add(await aexecute(engine, task))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return _end(engine, report, tally, progress)


def _begin(
    engine: EngineConfig, batch: str, progress: Progress
) -> tuple[BatchReport, _Tally, Claimer]:
    counts = engine.store.batch_counts(batch)
    total = sum(counts.values())
    skipped = sum(n for status, n in counts.items() if status in FINISHED_STATUSES)
    progress.start(batch, total=total, finished=skipped)
    tell(engine.observer, "batch_started", engine.clock.now, batch=batch)
    report = BatchReport(batch=batch, total=total, skipped=skipped)
    report.elapsed_seconds = time.monotonic()
    return report, _Tally(progress), Claimer(engine, batch)


def _end(
    engine: EngineConfig, report: BatchReport, tally: _Tally, progress: Progress
) -> BatchReport:
    report.elapsed_seconds = time.monotonic() - report.elapsed_seconds
    report.ran = tally.ran
    report.resumed = tally.resumed
    report.failures = tally.failures
    report.counts = dict(Counter(engine.store.batch_counts(report.batch)))
    # Where the batch stands now: child tasks its tasks spawned meanwhile count.
    report.total = sum(report.counts.values())
    tell(engine.observer, "batch_ended", engine.clock.now, batch=report.batch)
    progress.close(report.counts)
    return report
