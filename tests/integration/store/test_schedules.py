"""Schedules on a real store (each backend), with a fake clock.

The scenario is the nightly revenue pipeline: every day at 04:30 Asia/Tokyo,
which is 19:30 UTC the day before. A tick is ``app.fire_due_schedules()``, what a
worker does on its own; the firings it creates run with a burst ``Worker``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from cairn import Cairn, Context
from cairn.clock import FakeClock
from cairn.schedule import Catchup
from cairn.store import admin
from cairn.store.records import NewTask
from cairn.worker import Worker

# 2026-05-23 19:00 UTC is 04:00 in Tokyo: half an hour before the nightly run.
BEFORE_FIRST = datetime(2026, 5, 23, 19, 0, tzinfo=UTC)
FIRST = datetime(2026, 5, 23, 19, 30, tzinfo=UTC)
DAY = timedelta(days=1)
# From BEFORE_FIRST, this misses FIRST and the two mornings after it.
OUTAGE = 2 * DAY + timedelta(hours=6)


def nightly_app(url: str, clock: FakeClock, catchup: Catchup = "latest") -> Cairn:
    """An app with the nightly revenue schedule; its task records what it got."""
    app = Cairn(url, clock=clock)

    @app.schedule("30 4 * * *", tz="Asia/Tokyo", catchup=catchup)
    @app.task
    def nightly_revenue(ctx: Context, fired_at: datetime) -> str:
        return fired_at.isoformat()

    return app


def nightly_id(fired_at: datetime) -> str:
    return f"schedule:nightly_revenue/{fired_at:%Y-%m-%dT%H:%M:%SZ}"


def batch_ids(app: Cairn, batch: str = "schedule:nightly_revenue") -> list[str]:
    return [task.id for task in admin(app.store).list_tasks(batch=batch)]


@pytest.fixture
def at_four(clock: FakeClock) -> FakeClock:
    """The fake clock at 04:00 Tokyo time, half an hour before the first firing."""
    clock.advance((BEFORE_FIRST - clock.now()).total_seconds())
    return clock


@pytest.fixture
def nightly(store_url: str, at_four: FakeClock) -> Iterator[Cairn]:
    app = nightly_app(store_url, at_four)
    yield app
    app.close()


# -- firing times and ids -------------------------------------------------------------
def test_fires_at_0430_tokyo_once_with_a_deterministic_id(
    nightly: Cairn, at_four: FakeClock
) -> None:
    """The first tick only registers the schedule; at 04:30 Tokyo (19:30 UTC) one
    firing is created, with the firing time in its id; ticking again creates none.
    The task gets fired_at as 04:30 in Tokyo."""
    assert nightly.fire_due_schedules() == []
    at_four.advance(29 * 60)
    assert nightly.fire_due_schedules() == []  # 04:29: not yet
    at_four.advance(60)
    assert nightly.fire_due_schedules() == [nightly_id(FIRST)]
    assert nightly.fire_due_schedules() == []
    at_four.advance(3600)
    assert nightly.fire_due_schedules() == []

    report = Worker(nightly, burst=True).run()
    assert report.completed == 1
    task = nightly.store.get_task(nightly_id(FIRST))
    assert task is not None
    assert task.result == '"2026-05-24T04:30:00+09:00"'
    row = nightly.store.get_schedule("nightly_revenue")
    assert row is not None
    assert row.last_fired_at == FIRST


def test_a_new_schedule_does_not_backfill_history(store_url: str, at_four: FakeClock) -> None:
    """A schedule first seen at 05:00 Tokyo does not create that morning's 04:30
    run: it counts from when it was first seen."""
    at_four.advance(3600)
    with nightly_app(store_url, at_four) as app:
        assert app.fire_due_schedules() == []
        at_four.advance(DAY.total_seconds())
        assert app.fire_due_schedules() == [nightly_id(FIRST + DAY)]


def test_each_day_fires_when_ticked_daily(nightly: Cairn, at_four: FakeClock) -> None:
    """Ticked every few hours for a week, the schedule fires once a day, each day."""
    nightly.fire_due_schedules()
    created = []
    for _ in range(7 * 8):
        at_four.advance(3 * 3600)
        created += nightly.fire_due_schedules()
    assert created == [nightly_id(FIRST + n * DAY) for n in range(7)]


# -- missed firings: the catch-up policies -------------------------------------------------
def _after_an_outage(store_url: str, clock: FakeClock, catchup: Catchup) -> tuple[Cairn, list[str]]:
    """Register the schedule, then no worker runs for two days and six hours:
    three mornings are missed."""
    app = nightly_app(store_url, clock, catchup)
    app.fire_due_schedules()
    clock.advance(OUTAGE.total_seconds())
    return app, app.fire_due_schedules()


def test_catchup_latest_runs_only_the_most_recent_missed_firing(
    store_url: str, at_four: FakeClock
) -> None:
    """catchup='latest' (the default): of three missed mornings, one firing,
    the latest, is created; the earlier two are passed over for good."""
    app, created = _after_an_outage(store_url, at_four, "latest")
    with app:
        assert created == [nightly_id(FIRST + 2 * DAY)]
        assert app.fire_due_schedules() == []
        assert batch_ids(app) == created


def test_catchup_all_runs_every_missed_firing(store_url: str, at_four: FakeClock) -> None:
    """catchup='all': every missed morning gets its firing, oldest first."""
    app, created = _after_an_outage(store_url, at_four, "all")
    with app:
        assert created == [nightly_id(FIRST + n * DAY) for n in range(3)]
        assert app.fire_due_schedules() == []
        report = Worker(app, burst=True).run()
        assert report.completed == 3


def test_catchup_none_runs_no_missed_firing_but_keeps_firing_on_time(
    store_url: str, at_four: FakeClock
) -> None:
    """catchup='none': missed mornings are passed over; the next morning, seen
    on time, fires as usual."""
    app, created = _after_an_outage(store_url, at_four, "none")
    with app:
        assert created == []
        at_four.advance(timedelta(hours=18, minutes=30).total_seconds())  # the next 04:30
        assert app.fire_due_schedules() == [nightly_id(FIRST + 3 * DAY)]
        assert batch_ids(app) == [nightly_id(FIRST + 3 * DAY)]


def test_catchup_all_after_a_long_outage_creates_every_firing(
    store_url: str, clock: FakeClock
) -> None:
    """A minutely schedule with catchup='all', down for a day: 1,440 firings,
    created in several transactions, each once."""
    with Cairn(store_url, clock=clock) as app:

        @app.schedule("* * * * *", catchup="all")
        @app.task
        def minutely(ctx: Context, fired_at: datetime) -> None:
            return None

        app.fire_due_schedules()
        clock.advance(DAY.total_seconds())
        created = app.fire_due_schedules()
        assert len(created) == 1440 == len(set(created))
        assert app.fire_due_schedules() == []
        assert len(batch_ids(app, "schedule:minutely")) == 1440


# -- races: many workers ticking at once ---------------------------------------------------
def _tick_together(apps: list[Cairn]) -> list[list[str]]:
    """Every app ticks at the same moment, each in its own thread."""
    barrier = threading.Barrier(len(apps))
    results: list[list[str]] = [[] for _ in apps]
    errors: list[BaseException] = []

    def tick(index: int) -> None:
        try:
            barrier.wait()
            results[index] = apps[index].fire_due_schedules()
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)

    threads = [threading.Thread(target=tick, args=(i,)) for i in range(len(apps))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    return results


@pytest.mark.parametrize("catchup", ["latest", "all"])
def test_workers_ticking_at_once_create_each_firing_once(
    store_url: str, at_four: FakeClock, catchup: Catchup
) -> None:
    """Eight apps (eight connections, as eight workers have) tick at the same
    moment after an outage: the firings the policy calls for exist once each,
    and exactly one app created each of them."""
    apps = [nightly_app(store_url, at_four, catchup) for _ in range(8)]
    try:
        apps[0].fire_due_schedules()
        at_four.advance(OUTAGE.total_seconds())
        results = _tick_together(apps)
        created = [task_id for result in results for task_id in result]
        expected = (
            [nightly_id(FIRST + n * DAY) for n in range(3)]
            if catchup == "all"
            else [nightly_id(FIRST + 2 * DAY)]
        )
        assert sorted(created) == expected
        assert batch_ids(apps[0]) == expected
    finally:
        for app in apps:
            app.close()


def test_a_stale_catchup_decision_writes_nothing(store_url: str, at_four: FakeClock) -> None:
    """Worker A reads the schedule's row; worker B, ticking an hour later, takes
    the catch-up decision first. A's decision, made from the row it read, is
    refused whole: no row change, no task. So two workers computing 'latest' at
    different moments cannot both create a firing."""
    later_clock = FakeClock(at_four.now())
    a = nightly_app(store_url, at_four)
    b = nightly_app(store_url, later_clock)
    try:
        a.fire_due_schedules()
        at_four.advance((3 * DAY).total_seconds())
        later_clock.advance((3 * DAY + timedelta(hours=1)).total_seconds())
        stale = a.store.get_schedule("nightly_revenue")
        assert stale is not None
        # At 04:00 Tokyo, A's 'latest' is the morning before; at 05:00, B's is today's.
        assert b.fire_due_schedules() == [nightly_id(FIRST + 3 * DAY)]

        other = nightly_id(FIRST + 2 * DAY)
        task = NewTask(other, "nightly_revenue", "{}", "json", "schedule:nightly_revenue", "x")
        moved = replace(stale, covered_until=FIRST + 2 * DAY, last_fired_at=FIRST + 2 * DAY)
        assert not a.store.advance_schedule(stale.covered_until, moved, [task], at_four.now())
        assert a.store.get_task(other) is None
        assert a.fire_due_schedules() == []
        assert batch_ids(a) == [nightly_id(FIRST + 3 * DAY)]
    finally:
        a.close()
        b.close()


# -- DST: each local time fires once -------------------------------------------------------
def _tick_through_a_day(url: str, clock: FakeClock, cron: str, start: datetime) -> list[str]:
    """Register ``cron`` in Los Angeles at ``start``, then tick every ten minutes
    for two days; returns the firing ids created."""
    clock.advance((start - clock.now()).total_seconds())
    created: list[str] = []
    with Cairn(url, clock=clock) as app:

        @app.schedule(cron, tz="America/Los_Angeles")
        @app.task
        def local_job(ctx: Context, fired_at: datetime) -> str:
            return fired_at.isoformat()

        app.fire_due_schedules()
        for _ in range(2 * 24 * 6):
            clock.advance(600)
            created += app.fire_due_schedules()
        Worker(app, burst=True).run()
        results = [app.store.get_task(task_id) for task_id in created]
        assert all(task is not None and task.status == "completed" for task in results)
    return created


def test_skipped_local_time_fires_once_when_clocks_jump_forward(
    store_url: str, clock: FakeClock
) -> None:
    """02:30 does not exist in Los Angeles on 2026-03-08: that day's firing
    happens once, at the jump (03:00 PDT, 10:00 UTC); the next day's at 02:30."""
    created = _tick_through_a_day(
        store_url, clock, "30 2 * * *", datetime(2026, 3, 7, 12, tzinfo=UTC)
    )
    assert created == [
        "schedule:local_job/2026-03-08T10:00:00Z",
        "schedule:local_job/2026-03-09T09:30:00Z",
    ]


def test_repeated_local_time_fires_once_when_clocks_go_back(
    store_url: str, clock: FakeClock
) -> None:
    """01:30 happens twice in Los Angeles on 2026-11-01: it fires once, at the
    first (01:30 PDT, 08:30 UTC), not again an hour later."""
    created = _tick_through_a_day(
        store_url, clock, "30 1 * * *", datetime(2026, 10, 31, 12, tzinfo=UTC)
    )
    assert created == [
        "schedule:local_job/2026-11-01T08:30:00Z",
        "schedule:local_job/2026-11-02T09:30:00Z",
    ]


# -- a schedule changed between deploys ----------------------------------------------------
def test_changed_schedule_counts_from_when_it_changed(store_url: str, at_four: FakeClock) -> None:
    """Deployed at 04:30 one day, the schedule moves to 05:30 the next morning at
    06:00, after the 05:30 it now names: that 05:30 is not run (a changed
    schedule counts from when a worker first sees it), the following one is."""
    with nightly_app(store_url, at_four) as old:
        old.fire_due_schedules()
        at_four.advance(1800)
        assert old.fire_due_schedules() == [nightly_id(FIRST)]
    at_four.advance((DAY + timedelta(hours=1)).total_seconds())  # 06:00 next day, Tokyo
    with Cairn(store_url, clock=at_four) as new:

        @new.schedule("30 5 * * *", tz="Asia/Tokyo")
        @new.task
        def nightly_revenue(ctx: Context, fired_at: datetime) -> None:
            return None

        assert new.fire_due_schedules() == []
        row = new.store.get_schedule("nightly_revenue")
        assert row is not None
        assert (row.cron, row.last_fired_at) == ("30 5 * * *", FIRST)
        at_four.advance(DAY.total_seconds())
        assert new.fire_due_schedules() == [nightly_id(FIRST + 2 * DAY + timedelta(hours=1))]
