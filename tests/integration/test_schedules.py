"""Schedules refused when declared, and the CLI's listing (on SQLite); the
scheduling tests on every backend are in ``store/test_schedules.py``.

The scenario is the nightly revenue pipeline: every day at 04:30 Asia/Tokyo,
which is 19:30 UTC the day before. A tick is ``app.fire_due_schedules()``, what a
worker does on its own; the firings it creates run with a burst ``Worker``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from typer.testing import CliRunner

from cairn import Cairn, Context, TaskDef
from cairn.cli import app as cli_app
from cairn.clock import FakeClock
from cairn.errors import ConfigurationError, NotACairnStore, TaskNotRegistered
from cairn.store import open_store
from tests.integration.store.test_schedules import DAY, nightly_app

TOKYO = ZoneInfo("Asia/Tokyo")
LA = ZoneInfo("America/Los_Angeles")


# -- bad input -----------------------------------------------------------------------------
def _schedule_on(app: Cairn, **options: object) -> Callable[[TaskDef[..., object]], object]:
    return app.schedule(**options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cron": "61 4 * * *"}, "not a cron expression"),
        ({"cron": "every day"}, "not a cron expression"),
        ({"cron": "30 4 * * *", "tz": "Tokyo/Asia"}, "unknown time zone 'Tokyo/Asia'"),
        ({"cron": "30 4 * * *", "catchup": "some"}, "catchup='some' is not"),
    ],
)
def test_bad_schedule_is_refused_when_decorated(
    app: Cairn, options: dict[str, object], message: str
) -> None:
    """A bad cron expression, time zone or policy fails at decoration time, with
    what was wrong and what to give instead."""
    with pytest.raises(ConfigurationError, match=message):
        _schedule_on(app, **options)
    assert app.schedules() == []


def test_schedule_below_task_is_a_clear_error(app: Cairn) -> None:
    """@app.schedule must be above @app.task; the other order says so."""
    with pytest.raises(ConfigurationError, match=r"put @app\.schedule above @app\.task"):

        @app.task
        @app.schedule("30 4 * * *")  # type: ignore[arg-type]
        def wrong_order(ctx: Context, fired_at: datetime) -> None:
            return None


def test_scheduled_task_must_take_fired_at(app: Cairn) -> None:
    """A task that cannot take fired_at, or needs other arguments, is refused."""

    @app.task
    def no_time(ctx: Context) -> None:
        return None

    @app.task
    def needs_more(ctx: Context, fired_at: datetime, region: str) -> None:
        return None

    for task in (no_time, needs_more):
        with pytest.raises(ConfigurationError, match="must take the firing time as fired_at"):
            app.schedule("30 4 * * *")(task)


def test_two_schedules_of_one_task_need_names(app: Cairn) -> None:
    """A second schedule on the same task needs a name of its own; with one, both fire."""

    @app.schedule("0 9 * * 1-5", tz="Asia/Tokyo")
    @app.task
    def digest(ctx: Context, fired_at: datetime) -> None:
        return None

    with pytest.raises(ConfigurationError, match="two schedules are named 'digest'"):
        app.schedule("0 12 * * 6", tz="Asia/Tokyo")(digest)
    app.schedule("0 12 * * 6", tz="Asia/Tokyo", name="digest-saturday")(digest)
    assert [s.name for s in app.schedules()] == ["digest", "digest-saturday"]


def test_task_of_another_app_is_refused(app: Cairn, tmp_path: Path) -> None:
    """Scheduling a task registered on another app is refused."""
    with Cairn(f"sqlite:///{tmp_path / 'other.db'}") as other:

        @other.task
        def elsewhere(ctx: Context, fired_at: datetime) -> None:
            return None

        with pytest.raises(TaskNotRegistered):
            app.schedule("30 4 * * *")(elsewhere)


def test_without_croniter_the_error_says_what_to_install(tmp_path: Path) -> None:
    """Where croniter is not installed, app.schedule says to install the extra."""
    script = (
        "import sys; sys.modules['croniter'] = None\n"
        "from cairn import Cairn\n"
        "from cairn.errors import ConfigurationError\n"
        f"app = Cairn('sqlite:///{tmp_path / 'c.db'}')\n"
        "try:\n"
        "    app.schedule('30 4 * * *')\n"
        "except ConfigurationError as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert "pip install 'cairn-durable[schedule]'" in result.stdout


# -- the CLI -------------------------------------------------------------------------------
def test_cli_lists_each_schedule_with_last_and_next_firing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cairn schedules MODULE:APP`` shows each schedule with its last firing
    and the next one, in the schedule's zone; before any worker ticked, it says so."""
    url = f"sqlite:///{tmp_path / 'c.db'}"
    (tmp_path / "sched_cli_app.py").write_text(
        "from datetime import datetime\n"
        "from cairn import Cairn\n"
        f"app = Cairn({url!r})\n"
        "@app.schedule('30 4 * * *', tz='Asia/Tokyo')\n"
        "@app.task\n"
        "def nightly_revenue(ctx, fired_at: datetime):\n"
        "    return None\n"
    )
    open_store(url).close()
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    before = runner.invoke(cli_app, ["schedules", "sched_cli_app:app"])
    assert before.exit_code == 0, before.output
    assert "no worker has ticked it yet" in before.output
    assert "04:30:00 +0900" in before.output

    # Ticked three days ago and two days ago: yesterday's firing is overdue.
    clock = FakeClock(datetime.now(UTC) - 3 * DAY)
    with nightly_app(url, clock) as app:
        app.fire_due_schedules()
        clock.advance(DAY.total_seconds())
        fired = app.fire_due_schedules()
    assert len(fired) == 1
    listed = runner.invoke(cli_app, ["schedules", "sched_cli_app:app", "--json"])
    assert listed.exit_code == 0, listed.output
    assert '"last_fired_at_local": "' in listed.output
    assert fired[0].rsplit("/", 1)[1].replace("Z", "+00:00") in listed.output
    assert "overdue: is a worker running?" in listed.output


def test_cli_before_any_worker_lists_the_schedules_and_creates_no_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cairn schedules`` on an app whose store does not exist yet (no worker
    has run) lists the next firings, says on stderr that there is no store yet
    and that the worker creates it, and leaves no file behind."""
    store = tmp_path / "not-yet.db"
    (tmp_path / "sched_first_app.py").write_text(
        "from datetime import datetime\n"
        "from cairn import Cairn\n"
        f"app = Cairn({f'sqlite:///{store}'!r})\n"
        "@app.schedule('30 4 * * *', tz='Asia/Tokyo')\n"
        "@app.task\n"
        "def nightly_revenue(ctx, fired_at: datetime):\n"
        "    return None\n"
    )
    monkeypatch.chdir(tmp_path)
    listed = CliRunner().invoke(cli_app, ["schedules", "sched_first_app:app"])
    assert listed.exit_code == 0, listed.output
    assert "04:30:00 +0900" in listed.stdout
    assert "no worker has ticked it yet" in listed.stdout
    assert " ".join(listed.stderr.split()) == (
        f"no store at {store} yet: no worker has run, so no schedule has fired; "
        "`cairn worker sched_first_app:app` creates it"
    )
    assert not store.exists()


def test_cli_before_any_worker_on_postgres_creates_no_schema(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_url: str
) -> None:
    """On PostgreSQL, a ``?schema=`` no worker has created yet is reported the
    same way, and ``cairn schedules`` does not create it."""
    url = f"{pg_url}?schema=sched_not_yet"
    (tmp_path / "sched_pg_app.py").write_text(
        "from datetime import datetime\n"
        "from cairn import Cairn\n"
        f"app = Cairn({url!r})\n"
        "@app.schedule('0 * * * *')\n"
        "@app.task\n"
        "def hourly(ctx, fired_at: datetime):\n"
        "    return None\n"
    )
    monkeypatch.chdir(tmp_path)
    listed = CliRunner().invoke(cli_app, ["schedules", "sched_pg_app:app"])
    assert listed.exit_code == 0, listed.output
    assert "no worker has ticked it yet" in listed.stdout
    assert f"no store at {url} yet: no worker has run" in " ".join(listed.stderr.split())
    with pytest.raises(NotACairnStore):
        open_store(url, create=False).close()
