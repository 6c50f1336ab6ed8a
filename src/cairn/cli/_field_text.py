"""Turning stored rows into short human text: times, durations, errors, values.

How a stored error or value is read is the admin API's (``cairn.admin.views``);
this module only puts it on one line."""

from __future__ import annotations

from datetime import UTC, datetime

from cairn.admin.views import ErrorView, parse_error, value_view

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


def error_line(text: str | None, *, width: int | None = _ERROR_WIDTH) -> str:
    """``Type: message`` from a stored error, on one line, cut to ``width``."""
    parsed = parse_error(text)
    if parsed is None:
        return ""
    message = " ".join(str(parsed.get("message", "")).split())
    line = f"{parsed.get('type', '?')}: {message}" if message else str(parsed.get("type", "?"))
    return clip(line, width)


def view_error_line(error: ErrorView | None, *, width: int | None = None) -> str:
    """``Type: message`` of an error view, on one line, cut to ``width``."""
    if error is None:
        return ""
    message = " ".join(error.message.split())
    return clip(f"{error.type}: {message}" if message else error.type, width)


def clip(text: str, width: int | None) -> str:
    """``text`` cut to ``width`` characters, marked with an ellipsis when cut."""
    if width is None or len(text) <= width:
        return text
    return text[: width - 3] + "..."


def stored_value(text: str | None, codec: str) -> str:
    """A stored value (arguments, a result) as display text.

    Pickled values are never decoded here: unpickling runs code from the store.
    """
    view = value_view(text, codec)
    if view is None or text is None:
        return MISSING
    if view.blob is not None:
        blob = view.blob
        return f"<in the blob store: {blob.size:,} bytes, sha256 {blob.sha256[:12]}…, {blob.ref}>"
    if view.json_text is None:
        return f"<{codec}-encoded, {len(text)} characters>"
    if len(text) > _VALUE_WIDTH:
        return f"{text[:_VALUE_WIDTH]}... ({len(text)} characters)"
    return text
