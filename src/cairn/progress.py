"""Showing a batch's progress: a live bar on a terminal, plain lines elsewhere."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol, TextIO

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


# Seconds between two progress lines off a terminal: a line a task would flood a
# log at hundreds of tasks a second; a line a minute leaves a slow batch mute.
LINE_INTERVAL = 10.0
# The attribute cairn.observe.logs sets on the handler it installs.
LOGS_MARK = "cairn_configured"


def _clock(seconds: float) -> str:
    """``42s``, ``3m07s``, ``2h05m``."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    return f"{minutes}m{secs:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


class LineProgress(_Counts):
    """Plain lines on stderr, for logs and pipes (no logging setup needed): one at
    the start, one at most every ``interval`` seconds as tasks finish (done,
    failed, running, rate, ETA), one at the end."""

    def __init__(self, interval: float = LINE_INTERVAL, stream: TextIO | None = None) -> None:
        super().__init__()
        self.interval = interval
        self.stream = stream
        self.last_line = time.monotonic()

    def _write(self, line: str) -> None:
        """The line on stderr; through the ``cairn`` logger instead when
        ``cairn.observe.logs.configure_logging`` set logging up (its handler is
        marked), with the counts as fields."""
        configured = any(getattr(h, LOGS_MARK, False) for h in logging.getLogger().handlers)
        if self.stream is None and configured and log.isEnabledFor(logging.INFO):
            fields = {"batch": self.batch, "total": self.total, "done": self.done}
            log.info("%s", line, extra={**fields, "failed": self.failed, "running": self.running})
            return
        stream = self.stream or sys.stderr
        stream.write(f"cairn: {line}\n")
        stream.flush()

    def start(self, batch: str, *, total: int, finished: int) -> None:
        self.batch, self.total, self.done = batch, total, finished
        self._write(f"batch {batch}: {total} tasks, {finished} already finished")

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
            now = time.monotonic()
            if now - self.last_line < self.interval:
                return
            self.last_line = now
            rate, eta = self.rate_and_eta()
            self._write(
                f"batch {self.batch}: {self.done}/{self.total} done, {self.failed} failed, "
                f"{self.running} running, {rate:.1f} tasks/s"
                + ("" if eta is None else f", ETA {_clock(eta)}")
            )

    def close(self, counts: Mapping[str, int]) -> None:
        elapsed = time.monotonic() - self.started_at
        summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no tasks"
        self._write(
            f"batch {self.batch}: this run took {_clock(elapsed)} for {self.ran} task(s); "
            f"now {summary}"
        )


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
    """A bar when stderr is a terminal (or ``show=True``), plain lines otherwise;
    nothing when ``show=False``."""
    if show is False:
        return SilentProgress()
    if show or sys.stderr.isatty():
        return BarProgress()
    return LineProgress()
