"""The demo's live progress: how many of the batch's steps have finished.

Both runs are followed through the step log (a line per finished step), so the
count is the same whether a worker process or this one runs the steps. On a
terminal it is a transient bar; elsewhere (a pipe, a CI log) a plain line at
most every ``LINE_SECONDS``, so a run of several seconds is never silent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Self

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress

from cairn.demo.batch import StepLog

# Seconds between two progress lines off a terminal.
LINE_SECONDS = 2.0
# How often the step log is read while this process runs the batch itself.
_WATCH_SECONDS = 0.1


class StepProgress:
    """``label: N/TOTAL steps finished``, updated with ``update(N)``."""

    def __init__(
        self, console: Console, label: str, total: int, *, interval: float = LINE_SECONDS
    ) -> None:
        self.console = console
        self.label = label
        self.total = total
        self.interval = interval
        self._bar: RichProgress | None = None
        self._bar_task = TaskID(0)
        self._last_line = time.monotonic()
        self._shown = -1

    def __enter__(self) -> Self:
        if self.console.is_terminal:
            self._bar = RichProgress(
                TextColumn(f"  {self.label}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("steps"),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,  # the report that follows says how the run ended
            )
            self._bar.start()
            self._bar_task = self._bar.add_task(self.label, total=self.total)
        return self

    def update(self, finished: int) -> None:
        """``finished`` steps are done so far."""
        if self._bar is not None:
            self._bar.update(self._bar_task, completed=finished)
            return
        now = time.monotonic()
        if finished != self._shown and now - self._last_line >= self.interval:
            self._last_line, self._shown = now, finished
            self.console.print(f"  {self.label}: {finished}/{self.total} steps finished")

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.stop()


@contextmanager
def watching(log: StepLog, progress: StepProgress) -> Iterator[None]:
    """Feed ``progress`` from ``log`` in a thread while the block runs."""
    done = threading.Event()

    def watch() -> None:
        while not done.wait(_WATCH_SECONDS):
            progress.update(log.lines())

    watcher = threading.Thread(target=watch, name="cairn-demo-progress", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
