"""Time, behind a small seam so tests never sleep for real.

cairn reads wall-clock time for records and leases, and waits for retries and
durable sleeps. Both go through a ``Clock``; tests pass a ``FakeClock`` whose
sleeps only move its own time forward.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """Where cairn gets the time and how it waits."""

    def now(self) -> datetime:
        """The current time, tz-aware UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (``time.monotonic``): how this
        process measures how long ago the store last confirmed its lease."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block the calling thread for ``seconds``."""
        ...

    async def asleep(self, seconds: float) -> None:
        """Suspend the calling coroutine for ``seconds``."""
        ...


class SystemClock:
    """The real clock."""

    # datetime.now(UTC), bound once: a C call with no Python frame of its own,
    # for the clock read on every step's record.
    now: Callable[[], datetime] = functools.partial(datetime.now, UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    async def asleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class FakeClock:
    """A clock for tests: sleeping advances it instantly; nothing waits for real."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 5, 24, 0, 0, tzinfo=UTC)
        self._start = self._now
        self._lock = threading.Lock()
        self.slept: list[float] = []

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        """Seconds since the clock's start, moved by ``advance`` and sleeps only:
        a test "pauses" the process by advancing it."""
        with self._lock:
            return (self._now - self._start).total_seconds()

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += timedelta(seconds=seconds)

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(max(0.0, seconds))

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)
        await asyncio.sleep(0)


def to_iso(moment: datetime) -> str:
    """ISO 8601 text with an offset, always in UTC, so stored times sort as text."""
    if moment.tzinfo is not UTC:  # the clock's own times skip the conversion (hot path)
        if moment.tzinfo is None:
            raise ValueError("cairn records only tz-aware datetimes")
        moment = moment.astimezone(UTC)
    # isoformat() without timespec is twice as fast; it drops a zero fraction,
    # which we put back so every stored time has the same width and sorts as text.
    text = moment.isoformat()
    if moment.microsecond == 0:
        return f"{text[:19]}.000000{text[19:]}"
    return text


def from_iso(text: str) -> datetime:
    """Parse text written by ``to_iso`` back into an aware UTC datetime."""
    return datetime.fromisoformat(text)
