"""Reading times and durations from the command line: ``15m``, ``24h``, ISO dates."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta

_DURATION = re.compile(r"^\s*(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>ms|s|m|h|d|w)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> float:
    """Seconds in ``text``: ``90`` or ``90s``, ``15m``, ``2h``, ``1d``, ``1w``, ``500ms``."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration; write 90s, 15m, 2h or 1d")
    return float(match.group("n")) * _UNIT_SECONDS[match.group("unit") or "s"]


def parse_moment(text: str, now: datetime) -> datetime:
    """A moment: an ISO date or time (UTC unless it says), or a duration ago (``24h``)."""
    try:
        return now - timedelta(seconds=parse_duration(text))
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ValueError(
            f"{text!r} is neither a time (2026-05-24, 2026-05-24T06:00Z) nor a duration ago "
            "(24h, 7d)"
        ) from exc
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def day_bounds(day: date) -> tuple[datetime, datetime]:
    """The UTC day ``[start, end)``."""
    start = datetime.combine(day, time(0), tzinfo=UTC)
    return start, start + timedelta(days=1)
