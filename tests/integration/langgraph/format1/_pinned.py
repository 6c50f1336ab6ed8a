"""Format 1, frozen (see ``format1.saver``). The original module's docstring:

One thread of the checkpointer's own for a SQLite store's statements.

A SQLite store keeps one connection per thread that uses it, until the store is
closed. LangGraph calls its checkpointer from short-lived threads (each run's
background executor), so calling the store from them directly would open a new
connection every few calls and keep it. ``Pinned`` runs the calls on one
long-lived thread instead: one connection, opened once. (SQLite serialises a
file's writers anyway.) On PostgreSQL the store's pool already bounds the
connections, so calls run in the caller's thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class Pinned:
    """Runs each call on the pinned thread (if ``pin``), and waits for it."""

    def __init__(self, *, pin: bool, on_close: Callable[[], Any]) -> None:
        self._thread: int | None = None
        self._on_close = on_close
        self._executor = (
            ThreadPoolExecutor(1, "cairn-langgraph", initializer=self._started) if pin else None
        )

    def _started(self) -> None:
        self._thread = threading.get_ident()

    def call(self, work: Callable[..., T], *args: Any) -> T:
        if self._executor is None or threading.get_ident() == self._thread:
            return work(*args)
        return self._executor.submit(work, *args).result()

    def close(self) -> None:
        """Release the pinned thread's connection (``on_close`` on it) and the thread
        (once: a second close does nothing)."""
        executor, self._executor = self._executor, None
        if executor is not None:
            if self._thread is not None:
                executor.submit(self._on_close).result()
            executor.shutdown()
