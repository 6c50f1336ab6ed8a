"""Turning stored rows into short human text: times, durations, errors, values."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from cairn.blobs.ref import is_ref, parse_ref

MISSING = "-"
_ERROR_WIDTH = 80
_VALUE_WIDTH = 400


def short_time(moment: datetime | None) -> str:
    """``2026-05-24 04:30:01Z``: UTC, to the second, the same on every machine."""
    if moment is None:
        return MISSING
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def iso_time(moment: datetime | None) -> str | None:
    """ISO 8601 with the UTC offset, for JSON."""
    return None if moment is None else moment.astimezone(UTC).isoformat()


def seconds_between(start: datetime | None, end: datetime | None) -> float | None:
    """Seconds from ``start`` to ``end``, or None when either is unknown."""
    if start is None or end is None:
        return None
    return (end - start).total_seconds()


def human_duration(seconds: float | None) -> str:
    """``0.25s``, ``12.3s``, ``4m05s``, ``2h03m``."""
    if seconds is None:
        return MISSING
    if seconds < 10:
        return f"{seconds:.2f}s"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def milliseconds(seconds: float | None) -> str:
    """A duration in whole milliseconds."""
    return MISSING if seconds is None else str(round(seconds * 1000))


def parse_error(text: str | None) -> dict[str, Any] | None:
    """A stored error ({type, message, traceback}) as a dict, tolerant of odd text."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if isinstance(value, dict):
        return value
    return {"type": "?", "message": text}


def error_line(text: str | None, *, width: int | None = _ERROR_WIDTH) -> str:
    """``Type: message`` from a stored error, on one line, cut to ``width``."""
    error = parse_error(text)
    if error is None:
        return ""
    message = " ".join(str(error.get("message", "")).split())
    line = f"{error.get('type', '?')}: {message}" if message else str(error.get("type", "?"))
    return clip(line, width)


def clip(text: str, width: int | None) -> str:
    """``text`` cut to ``width`` characters, marked with an ellipsis when cut."""
    if width is None or len(text) <= width:
        return text
    return text[: width - 3] + "..."


def stored_value(text: str | None, codec: str) -> str:
    """A stored value (arguments, a result) as display text.

    Pickled values are never decoded here: unpickling runs code from the store.
    """
    if text is None:
        return MISSING
    if is_ref(text):
        ref = parse_ref(text)
        return f"<in the blob store: {ref.size:,} bytes, sha256 {ref.sha256[:12]}…, {ref.uri}>"
    if codec != "json":
        return f"<{codec}-encoded, {len(text)} characters>"
    if len(text) > _VALUE_WIDTH:
        return f"{text[:_VALUE_WIDTH]}... ({len(text)} characters)"
    return text
