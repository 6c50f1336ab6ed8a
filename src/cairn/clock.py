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


# Three digits as text, for the microseconds of a stamp: two lookups instead of
# a format spec parsed for every time written.
_DIGITS3 = tuple(f"{n:03d}" for n in range(1000))
# The second most recently stamped, as (its fields, its "YYYY-MM-DDTHH:MM:SS."):
# a step writes two times, nearly always in the same second as the step before.
# One tuple, replaced whole, so threads sharing it never see half an update.
_last_second: tuple[tuple[int, int, int, int], str] = ((-1, -1, -1, -1), "")


def to_iso(moment: datetime) -> str:
    """ISO 8601 text with an offset, always in UTC, so stored times sort as text.

    Always with six digits of microseconds (``isoformat`` drops a zero
    fraction), so every stored time has the same width and sorts as text.
    """
    global _last_second
    if moment.tzinfo is not UTC:  # the clock's own times skip the conversion (hot path)
        if moment.tzinfo is None:
            raise ValueError("cairn records only tz-aware datetimes")
        moment = moment.astimezone(UTC)
    # isoformat() costs about three times what this does (callgrind, CPython
    # 3.11): it runs a generic formatter and asks the zone for its offset.
    second = (moment.second, moment.minute, moment.hour, moment.toordinal())
    last = _last_second
    if last[0] == second:
        prefix = last[1]
    else:
        prefix = moment.isoformat()[:19] + "."
        _last_second = (second, prefix)
    micros = moment.microsecond
    return f"{prefix}{_DIGITS3[micros // 1000]}{_DIGITS3[micros % 1000]}+00:00"


def from_iso(text: str) -> datetime:
    """Parse text written by ``to_iso`` back into an aware UTC datetime."""
    return datetime.fromisoformat(text)
