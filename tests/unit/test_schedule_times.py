"""From cron expressions in a time zone to firing instants (cairn.schedule).

Real zones from the IANA database: Asia/Tokyo (no DST) and America/Los_Angeles,
whose clocks jumped forward at 02:00 on 2026-03-08 and go back at 02:00 on
2026-11-01.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from cairn.schedule import instant, latest_at_or_before, next_after

TOKYO = ZoneInfo("Asia/Tokyo")
LA = ZoneInfo("America/Los_Angeles")


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def firings(cron: str, zone: ZoneInfo, start: datetime, end: datetime) -> list[datetime]:
    """Every firing after ``start`` up to ``end``, by repeated next_after."""
    found = []
    moment = next_after(cron, zone, start)
    while moment <= end:
        found.append(moment)
        moment = next_after(cron, zone, moment)
    return found


def test_tokyo_0430_is_1930_utc_the_day_before() -> None:
    """04:30 in Tokyo (UTC+9) is 19:30 UTC on the previous calendar day."""
    fired = next_after("30 4 * * *", TOKYO, utc(2026, 5, 23, 0, 0))
    assert fired == utc(2026, 5, 23, 19, 30)
    assert fired.astimezone(TOKYO) == datetime(2026, 5, 24, 4, 30, tzinfo=TOKYO)


def test_next_after_is_strictly_after_and_latest_is_inclusive() -> None:
    """A firing exactly at the moment is not 'after' it, but is 'at or before' it."""
    moment = utc(2026, 5, 23, 19, 30)
    assert next_after("30 4 * * *", TOKYO, moment) == utc(2026, 5, 24, 19, 30)
    assert latest_at_or_before("30 4 * * *", TOKYO, moment) == moment
    assert latest_at_or_before("30 4 * * *", TOKYO, moment - timedelta(seconds=1)) == utc(
        2026, 5, 22, 19, 30
    )


def test_skipped_local_time_fires_once_at_the_jump() -> None:
    """02:30 does not exist in Los Angeles on 2026-03-08 (02:00 PST became 03:00
    PDT): that day's 02:30 firing happens once, at the jump (10:00 UTC), and the
    days around it at 02:30 local."""
    found = firings("30 2 * * *", LA, utc(2026, 3, 6), utc(2026, 3, 10, 23))
    assert found == [
        utc(2026, 3, 6, 10, 30),
        utc(2026, 3, 7, 10, 30),
        utc(2026, 3, 8, 10, 0),
        utc(2026, 3, 9, 9, 30),
        utc(2026, 3, 10, 9, 30),
    ]
    assert found[2].astimezone(LA).strftime("%H:%M %Z") == "03:00 PDT"


def test_repeated_local_time_fires_once_at_its_first_occurrence() -> None:
    """01:30 happens twice in Los Angeles on 2026-11-01 (01:30 PDT, then 01:30
    PST an hour later): it fires once, at the first."""
    found = firings("30 1 * * *", LA, utc(2026, 10, 31), utc(2026, 11, 2, 23))
    assert found == [
        utc(2026, 10, 31, 8, 30),
        utc(2026, 11, 1, 8, 30),
        utc(2026, 11, 2, 9, 30),
    ]


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (utc(2026, 3, 8, 8), utc(2026, 3, 8, 12)),  # spring forward
        (utc(2026, 11, 1, 7), utc(2026, 11, 1, 11)),  # fall back
    ],
)
def test_frequent_firings_across_a_transition_never_repeat_or_go_back(
    start: datetime, end: datetime
) -> None:
    """Every 15 minutes across a DST change: instants strictly increase, so no
    instant fires twice; the skipped hour's times collapse onto the jump, and the
    repeated hour fires only in its first pass."""
    found = firings("*/15 * * * *", LA, start, end)
    assert found == sorted(set(found))
    locals_seen = [f.astimezone(LA).strftime("%m-%d %H:%M") for f in found]
    assert len(locals_seen) == len(set(locals_seen))  # no wall-clock time fired twice


def test_instant_of_repeated_and_skipped_times() -> None:
    """A repeated wall-clock time maps to its first occurrence; a skipped one to
    the moment the clocks jumped."""
    assert instant(datetime(2026, 11, 1, 1, 30), LA) == utc(2026, 11, 1, 8, 30)
    assert instant(datetime(2026, 3, 8, 2, 30), LA) == utc(2026, 3, 8, 10, 0)
    assert instant(datetime(2026, 3, 8, 2, 0), LA) == utc(2026, 3, 8, 10, 0)
    assert instant(datetime(2026, 5, 24, 4, 30), TOKYO) == utc(2026, 5, 23, 19, 30)


@pytest.mark.parametrize("cron", ["*/20 * * * *", "30 1 * * *", "30 2 * * *", "0 * * * *"])
@pytest.mark.parametrize("day", [utc(2026, 3, 8), utc(2026, 11, 1)])
def test_latest_and_next_agree_through_transition_days(cron: str, day: datetime) -> None:
    """For moments every 7 minutes through a DST-change day: the latest firing at
    or before a moment is one of the firings next_after enumerates, and the one
    after it is after the moment."""
    known = set(firings(cron, LA, day - timedelta(days=2), day + timedelta(days=2)))
    moment = day
    while moment < day + timedelta(days=1):
        latest = latest_at_or_before(cron, LA, moment)
        assert latest <= moment
        assert latest in known
        assert next_after(cron, LA, latest) > moment
        moment += timedelta(minutes=7)
