"""Stored times as text (cairn.clock.to_iso): the same text ``isoformat`` gives,
always with six digits of microseconds, whichever second was stamped before.

``to_iso`` keeps the last second it wrote, so these stamp times in orders that
would expose a stale one: back and forth across second, day and year boundaries,
and the same instant given in other zones.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from cairn.clock import from_iso, to_iso


def expected(moment: datetime) -> str:
    """``isoformat`` in UTC, with a zero fraction written out."""
    text = moment.astimezone(UTC).isoformat()
    return text if "." in text else f"{text[:19]}.000000{text[19:]}"


EDGES = [
    datetime(2026, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
    datetime(2027, 1, 1, 0, 0, 0, 0, tzinfo=UTC),
    datetime(2026, 12, 31, 23, 59, 59, 0, tzinfo=UTC),
    datetime(2027, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
    datetime(2027, 1, 2, 0, 0, 0, 1, tzinfo=UTC),  # same time of day, another day
    datetime(1, 1, 1, tzinfo=UTC),
    datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
    datetime(2026, 5, 24, 12, 0, 0, 5_000, tzinfo=UTC),
    datetime(2026, 5, 24, 12, 0, 0, 999, tzinfo=UTC),
]


def test_times_across_boundaries_are_written_as_isoformat_writes_them() -> None:
    """Each edge, stamped after every other one, is exactly its own text."""
    for before in EDGES:
        for moment in EDGES:
            to_iso(before)
            assert to_iso(moment) == expected(moment)


def test_a_run_of_times_within_and_across_seconds() -> None:
    """Times a few hundred milliseconds apart (steps' start and end times) are
    each their own text, and read back as the same instant."""
    moment = datetime(2026, 12, 1, 17, 0, 59, 700_000, tzinfo=UTC)
    for _ in range(40):
        text = to_iso(moment)
        assert text == expected(moment)
        assert from_iso(text) == moment
        moment += timedelta(microseconds=123_457)


@pytest.mark.parametrize("hours", [-8, 5.5, 14])
def test_a_time_in_another_zone_is_written_in_utc(hours: float) -> None:
    """An aware time in another zone is the same instant's UTC text."""
    zone = timezone(timedelta(hours=hours))
    moment = datetime(2026, 12, 1, 17, 0, 0, 250, tzinfo=UTC)
    to_iso(moment)  # its UTC second is the one remembered
    assert to_iso(moment.astimezone(zone)) == expected(moment)


def test_a_naive_time_is_refused() -> None:
    """A time without a zone cannot be stored as UTC: refused, naming why."""
    with pytest.raises(ValueError, match="tz-aware"):
        to_iso(datetime(2026, 12, 1, 17, 0, 0))
