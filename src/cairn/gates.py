"""Debounce and singleton options of an enqueue, checked (docs/debounce.md).

A debounce window is a positive number of seconds (or a ``timedelta``) of at
least a millisecond and at most ``LONGEST_WINDOW``; the store keeps it in
milliseconds. A singleton key is a name as ``cairn.names`` allows (no NUL, not
blank, at most ``NAME_LIMIT_BYTES``); ``on_conflict`` says what a second task
of a held key does: ``"drop"`` (nothing is made, the holder stands) or
``"queue"`` (it waits behind the holder, and runs after it ends).
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Literal

from cairn.errors import ConfigurationError
from cairn.names import check_name

__all__ = ["LONGEST_WINDOW", "OnConflict", "check_on_conflict", "check_singleton", "window_ms"]

OnConflict = Literal["drop", "queue"]
ON_CONFLICT: tuple[OnConflict, ...] = ("drop", "queue")
# Thirty days: a debounced task waits that long at most after its last event;
# past that a schedule is the tool, not a debounce.
LONGEST_WINDOW = timedelta(days=30)


def window_ms(value: object) -> int:
    """``value`` (seconds, or a ``timedelta``) as a debounce window in whole
    milliseconds; ``ConfigurationError`` saying what is allowed otherwise."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise ConfigurationError(
            f"debounce must be a number of seconds or a timedelta (e.g. debounce=30), not {value!r}"
        )
    longest = LONGEST_WINDOW.total_seconds()
    if not math.isfinite(seconds) or not 0.001 <= seconds <= longest:
        raise ConfigurationError(
            f"debounce={value!r} is out of range: give a window from 0.001 to "
            f"{longest:.0f} seconds (30 days)"
        )
    return round(seconds * 1000)


def check_singleton(key: object) -> str:
    """``key`` as a singleton key, or ``InvalidName`` (``ConfigurationError`` for a
    key that is not a str) saying why not."""
    if not isinstance(key, str):
        raise ConfigurationError(
            f"singleton must be a str key (e.g. singleton=f'sync/{{account}}'), not {key!r}"
        )
    return check_name("singleton key", key)


def check_on_conflict(value: object) -> OnConflict:
    """``value`` as an ``on_conflict`` choice, or ``ConfigurationError``."""
    for choice in ON_CONFLICT:
        if value == choice:
            return choice
    raise ConfigurationError(
        f"on_conflict must be 'drop' (keep the task that holds the key, make none) or "
        f"'queue' (wait behind it, run after it ends), not {value!r}"
    )
