"""Schedules: run a task at the times a cron expression names, in a time zone.

``@app.schedule("30 4 * * *", tz="Asia/Tokyo")`` above ``@app.task`` makes the
task fire every day at 04:30 Tokyo time. Each firing is an ordinary task whose id
is the schedule's name and the firing time in UTC
(``schedule:nightly/2026-05-23T19:30:00Z``), and which receives that time as
``fired_at``.

Workers tick the schedules of their app. A schedule's row in the store says how
far it has got (``covered_until``: every firing up to then was created or passed
over on purpose). A tick creates the firings after it by moving it forward with a
compare-and-set in the same transaction as the task inserts: of several workers
that tick at once, one moves it and the others change nothing and read again, so
each firing is created once, and a catch-up decision ("only the latest missed
firing") is taken once.

Local times are mapped to instants so that a firing never happens twice and the
mapping never goes backwards: a local time that occurs twice (clocks go back)
fires at its first occurrence; one that does not occur (clocks jump forward)
fires at the moment of the jump.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any, Literal, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cairn.errors import ConfigurationError, TaskArgumentsError
from cairn.names import check_name
from cairn.store.records import NewTask, ScheduleRecord
from cairn.task import TaskDef

if TYPE_CHECKING:
    from cairn.app import Cairn
    from cairn.store import Store

log = logging.getLogger("cairn")

Catchup = Literal["latest", "all", "none"]
CATCHUP_POLICIES: tuple[Catchup, ...] = get_args(Catchup)

# A firing seen by a worker within this long after its time is on time; later, it
# was missed (no worker ran then), and the catch-up policy decides about it.
ON_TIME = timedelta(seconds=60)
# "all" after a long outage creates its firings this many per transaction.
FIRINGS_PER_ROUND = 500
# Rounds of one tick lost to other workers before this one leaves it to them.
MAX_ROUNDS = 50
# A worker looks at the store at least this often even when no firing is due, so
# a schedule changed by another deploy is noticed.
RECHECK = timedelta(seconds=60)

_INSTALL = "pip install 'cairn-durable[schedule]'"


def _croniter() -> Any:
    try:
        from croniter import croniter  # type: ignore[import-untyped]
    except ImportError as exc:
        raise ConfigurationError(
            f"schedules need the croniter package, which is not installed: {_INSTALL}"
        ) from exc
    return croniter


def _shown(text: str) -> str:
    """``text`` quoted in a message, cut short if long."""
    return repr(text) if len(text) <= 60 else f"{text[:60]!r}... ({len(text)} characters)"


def zone_named(tz: str) -> ZoneInfo:
    """The IANA time zone ``tz``, or a ConfigurationError saying what to do."""
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:  # OSError: too long a name
        raise ConfigurationError(
            f"unknown time zone {_shown(tz)}: give an IANA name such as 'Asia/Tokyo' or 'UTC' "
            f"(a machine without a time zone database needs tzdata: {_INSTALL})"
        ) from exc


@dataclass(frozen=True)
class Schedule:
    """One schedule registered on an app."""

    name: str
    task: TaskDef[..., Any]
    cron: str
    tz: str
    catchup: Catchup

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.tz)

    @property
    def batch(self) -> str:
        """The batch the firing tasks belong to (``cairn tasks --batch`` lists them)."""
        return f"schedule:{self.name}"

    def task_id(self, fired_at: datetime) -> str:
        """The id of the firing at ``fired_at``: the same on every worker."""
        return f"{self.batch}/{_stamp(fired_at)}"

    def next_after(self, moment: datetime) -> datetime:
        """The first firing strictly after ``moment``, in UTC."""
        return next_after(self.cron, self.zone, moment)

    def latest_at_or_before(self, moment: datetime) -> datetime:
        """The last firing at or before ``moment``, in UTC."""
        return latest_at_or_before(self.cron, self.zone, moment)


def check_spec(cron: str, tz: str, catchup: str) -> None:
    """Raise ConfigurationError unless the cron expression, zone and policy are usable."""
    croniter = _croniter()
    if not croniter.is_valid(cron):
        raise ConfigurationError(
            f"{_shown(cron)} is not a cron expression cairn can use: give five fields, "
            "minute hour day-of-month month day-of-week (e.g. '30 4 * * *' for 04:30 "
            "every day), or six with seconds last"
        )
    zone_named(tz)
    if catchup not in CATCHUP_POLICIES:
        raise ConfigurationError(
            f"catchup={catchup!r} is not a catch-up policy: use 'latest' (run the most "
            "recent missed firing), 'all' (run every missed firing) or 'none'"
        )


def make_schedule(
    target: object, cron: str, tz: str, catchup: Catchup, name: str | None
) -> Schedule:
    """The schedule of ``target``, which must be a task (``@app.schedule`` above
    ``@app.task``) that accepts ``fired_at``."""
    if not isinstance(target, TaskDef):
        what = getattr(target, "__name__", repr(target))
        raise ConfigurationError(
            f"@app.schedule was given {what!r}, which is not a task: put @app.schedule "
            "above @app.task, as in\n    @app.schedule('30 4 * * *', tz='Asia/Tokyo')\n"
            "    @app.task\n    def nightly(ctx, fired_at): ..."
        )
    try:
        target.check_arguments({"fired_at": datetime.now(UTC)})
    except TaskArgumentsError as exc:
        raise ConfigurationError(
            f"task {target.name!r} is scheduled, so it must take the firing time as "
            "fired_at and need no other argument, e.g. def "
            f"{target.name}(ctx, fired_at: datetime): ... ({exc})"
        ) from exc
    schedule_name = check_name("schedule name", name or target.name)
    if not schedule_name or "/" in schedule_name:
        raise ConfigurationError(f"schedule name {schedule_name!r} must be non-empty, without '/'")
    return Schedule(schedule_name, target, cron, tz, catchup)


# -- from local wall-clock times to instants -------------------------------------------
def instant(local: datetime, zone: tzinfo) -> datetime:
    """The UTC instant of the naive wall-clock time ``local`` in ``zone``.

    A time the clocks pass twice maps to its first occurrence; a time they skip
    maps to the moment of the jump. So the mapping never goes backwards, and
    every local time fires once."""
    first = local.replace(tzinfo=zone).astimezone(UTC)  # fold=0: the earlier occurrence
    if first.astimezone(zone).replace(tzinfo=None) == local:
        return first
    # Skipped: fold=1 reads it with the offset after the jump, giving an instant
    # before the jump; fold=0 one after it. The jump lies between (whole seconds).
    before = int(local.replace(tzinfo=zone, fold=1).astimezone(UTC).timestamp())
    after = int(first.timestamp())
    offset_before = datetime.fromtimestamp(before, zone).utcoffset()
    while after - before > 1:
        middle = (before + after) // 2
        if datetime.fromtimestamp(middle, zone).utcoffset() == offset_before:
            before = middle
        else:
            after = middle
    return datetime.fromtimestamp(after, UTC)


def next_after(cron: str, zone: tzinfo, moment: datetime) -> datetime:
    """The first firing of ``cron`` in ``zone`` strictly after ``moment`` (UTC)."""
    start = moment.astimezone(zone).replace(tzinfo=None)
    times = _croniter()(cron, start)
    while True:
        # Local times after ``start`` map to instants after ``moment``, except
        # during the second pass of a repeated hour, whose times fired in the first.
        fired = instant(times.get_next(datetime), zone)
        if fired > moment:
            return fired


def latest_at_or_before(cron: str, zone: tzinfo, moment: datetime) -> datetime:
    """The last firing of ``cron`` in ``zone`` at or before ``moment`` (UTC)."""
    local = moment.astimezone(zone)
    start = local.replace(tzinfo=None) + timedelta(seconds=1)
    if local.fold:
        # In the second pass of a repeated hour, the rest of that hour's times
        # (already past: they fired in the first pass) are at or before ``moment``.
        start += _offset(local.replace(fold=0)) - _offset(local)
    times = _croniter()(cron, start)
    while True:
        fired = instant(times.get_prev(datetime), zone)
        if fired <= moment:
            return fired


def _offset(moment: datetime) -> timedelta:
    offset = moment.utcoffset()
    assert offset is not None  # an aware time in a ZoneInfo zone
    return offset


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- ticking ------------------------------------------------------------------------------
def _due(schedule: Schedule, covered: datetime, now: datetime) -> tuple[list[datetime], datetime]:
    """The firings to create after ``covered`` up to ``now``, and how far that
    covers (``covered`` itself when nothing is due)."""
    if schedule.catchup == "all":
        firings: list[datetime] = []
        moment = covered
        while len(firings) < FIRINGS_PER_ROUND:
            moment = schedule.next_after(moment)
            if moment > now:
                break
            firings.append(moment)
        return firings, (firings[-1] if firings else covered)
    latest = schedule.latest_at_or_before(now)
    if latest <= covered:
        return [], covered
    if schedule.catchup == "latest" or now - latest <= ON_TIME:
        return [latest], latest
    return [], latest  # "none": the latest firing was missed too; pass over it


def _firing(app: Cairn, schedule: Schedule, fired_at: datetime) -> NewTask:
    local = fired_at.astimezone(schedule.zone)
    args = app.codec.encode({"fired_at": local})
    return NewTask(
        schedule.task_id(fired_at),
        schedule.task.name,
        args,
        app.codec.name,
        schedule.batch,
        _stamp(fired_at),
        version=app.version,
    )


def tick(app: Cairn, schedule: Schedule, now: datetime) -> list[str]:
    """Create the firings of ``schedule`` due at ``now``; returns the ids created
    by this call (none if another worker created them first)."""
    store: Store = app.store
    created: list[str] = []
    for _ in range(MAX_ROUNDS):
        row = store.get_schedule(schedule.name)
        if row is None:
            # First seen: it counts from now. History before it existed is not
            # backfilled. A rival inserting first is fine: the row is the same.
            store.add_schedule(
                ScheduleRecord(
                    schedule.name,
                    schedule.task.name,
                    schedule.cron,
                    schedule.tz,
                    now,
                    None,
                    now,
                    now,
                )
            )
            return created
        spec = (schedule.task.name, schedule.cron, schedule.tz)
        if (row.task_name, row.cron, row.tz) != spec:
            # A changed schedule counts from now, as a new one would: firings the
            # old spec missed are not run, and the new one's start after now.
            log.info("cairn schedule %s: now %s in %s", schedule.name, schedule.cron, schedule.tz)
            changed = replace(
                row,
                task_name=schedule.task.name,
                cron=schedule.cron,
                tz=schedule.tz,
                covered_until=max(row.covered_until, now),
                last_fired_at=None,
            )
            store.advance_schedule(row.covered_until, changed, [], now)
            continue
        firings, covered = _due(schedule, row.covered_until, now)
        if covered == row.covered_until:
            return created
        tasks = [_firing(app, schedule, fired_at) for fired_at in firings]
        advanced = replace(
            row, covered_until=covered, last_fired_at=firings[-1] if firings else None
        )
        if store.advance_schedule(row.covered_until, advanced, tasks, now):
            created += [task.id for task in tasks]
            if len(firings) < FIRINGS_PER_ROUND:
                return created
        # Another worker moved the row first, or "all" has more to create: again.
    # Other workers kept moving the row (they create its firings), or "all" has a
    # backlog longer than this tick's rounds (the next tick goes on with it).
    log.warning("cairn schedule %s: not caught up in this tick; the next goes on", schedule.name)
    return created


def fire_due(app: Cairn, schedules: list[Schedule], now: datetime) -> list[str]:
    """Create every firing of ``schedules`` due at ``now``; the ids created."""
    created: list[str] = []
    for schedule in schedules:
        created += tick(app, schedule, now)
    return created


class Scheduler:
    """Ticks an app's schedules from a worker's loop: at once, then whenever a
    firing is due, and at least every ``RECHECK``."""

    def __init__(self, app: Cairn, on_created: Callable[[list[str]], None]) -> None:
        self.app = app
        self.on_created = on_created
        self._wake_at: datetime | None = None

    def maybe_tick(self) -> None:
        now = self.app.clock.now()
        if self._wake_at is not None and now < self._wake_at:
            return
        schedules = self.app.schedules()
        created = fire_due(self.app, schedules, now)
        if created:
            log.info("cairn schedules: created %s", ", ".join(created))
            self.on_created(created)
        upcoming = [schedule.next_after(now) for schedule in schedules]
        self._wake_at = min([now + RECHECK, *upcoming])
