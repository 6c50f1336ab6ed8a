"""A task's priority: claims take the highest first (docs/workers.md).

A priority is a plain integer, 0 unless given, between ``LOWEST`` and
``HIGHEST``: room for any scheme a user has (0-10, or -100 for "whenever"),
and well inside the 32-bit integer both stores keep it in.
"""

from __future__ import annotations

from cairn.errors import ConfigurationError

__all__ = ["HIGHEST", "LOWEST", "check_priority"]

LOWEST = -1_000_000
HIGHEST = 1_000_000


def check_priority(value: object) -> int:
    """``value`` as a priority, or ``ConfigurationError`` saying what is allowed."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(
            f"priority must be an integer (higher runs first, 0 by default), not {value!r}"
        )
    if not LOWEST <= value <= HIGHEST:
        raise ConfigurationError(
            f"priority {value} is out of range: give an integer from {LOWEST:,} to {HIGHEST:,}"
        )
    return value
