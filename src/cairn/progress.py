"""Showing a batch's progress: a live bar on a terminal, plain lines elsewhere."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from cairn.engine.execute import Outcome

log = logging.getLogger("cairn")


class Progress(Protocol):
    """Told about a batch as it runs."""

    def start(self, batch: str, *, total: int, finished: int) -> None: ...
    def task_started(self, task_id: str) -> None: ...
    def task_finished(self, outcome: Outcome) -> None: ...
    def close(self, counts: Mapping[str, int]) -> None: ...


class SilentProgress:
    """Shows nothing."""

    def start(self, batch: str, *, total: int, finished: int) -> None:
        pass

    def task_started(self, task_id: str) -> None:
        pass

    def task_finished(self, outcome: Outcome) -> None:
        pass

    def close(self, counts: Mapping[str, int]) -> None:
        pass


class _Counts:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batch = ""
        self.total = 0
        self.done = 0
        self.failed = 0
        self.running = 0
        self.started_at = time.monotonic()
        self.ran = 0

    def rate_and_eta(self) -> tuple[float, float | None]:
        elapsed = max(1e-6, time.monotonic() - self.started_at)
        rate = self.ran / elapsed
        left = self.total - self.done - self.failed
        return rate, (left / rate if rate > 0 else None)


class LogProgress(_Counts):
    """One log line per finished task, for logs and pipes."""

    def start(self, batch: str, *, total: int, finished: int) -> None:
        self.batch, self.total, self.done = batch, total, finished
        log.info("batch %s: %d tasks, %d already finished", batch, total, finished)

    def task_started(self, task_id: str) -> None:
        with self.lock:
            self.running += 1

    def task_finished(self, outcome: Outcome) -> None:
        with self.lock:
            self.running -= 1
            self.ran += 1
            if outcome.status == "completed":
                self.done += 1
            elif outcome.status == "failed":
                self.failed += 1
            rate, eta = self.rate_and_eta()
            log.info(
                "batch %s: %s %s (%d/%d done, %d failed, %d running, %.1f tasks/s%s)",
                self.batch,
                outcome.task_id,
                outcome.status,
                self.done,
                self.total,
                self.failed,
                self.running,
                rate,
                "" if eta is None else f", ETA {eta:.0f}s",
            )

    def close(self, counts: Mapping[str, int]) -> None:
        log.info("batch %s finished this run: %s", self.batch, dict(counts))


class BarProgress(_Counts):
    """A live Rich progress bar: done / failed / running, rate and ETA."""

    def start(self, batch: str, *, total: int, finished: int) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
        from rich.progress import Progress as RichProgress

        self.batch, self.total, self.done = batch, total, finished
        self._bar = RichProgress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self._bar.start()
        self._id = self._bar.add_task(batch, total=total, completed=finished, detail="")
        self._refresh()

    def _refresh(self) -> None:
        rate, _ = self.rate_and_eta()
        detail = f"failed {self.failed} · running {self.running} · {rate:.1f}/s"
        self._bar.update(self._id, completed=self.done + self.failed, detail=detail)

    def task_started(self, task_id: str) -> None:
        with self.lock:
            self.running += 1
            self._refresh()

    def task_finished(self, outcome: Outcome) -> None:
        with self.lock:
            self.running -= 1
            self.ran += 1
            if outcome.status == "completed":
                self.done += 1
            elif outcome.status == "failed":
                self.failed += 1
            self._refresh()

    def close(self, counts: Mapping[str, int]) -> None:
        self._bar.stop()


def choose_progress(show: bool | None) -> Progress:
    """A bar when stderr is a terminal (or ``show=True``), log lines otherwise;
    nothing when ``show=False``."""
    if show is False:
        return SilentProgress()
    if show or sys.stderr.isatty():
        return BarProgress()
    return LogProgress()
