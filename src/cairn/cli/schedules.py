"""``cairn schedules MODULE:APP``: each schedule of an app, its last and next firing."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import typer

from cairn.clock import SystemClock
from cairn.schedule import ON_TIME, Schedule
from cairn.store.records import ScheduleRecord

from ._consoles import note, stdout_console
from ._field_text import iso_time
from ._json_output import JsonOption, print_json
from ._store_option import opened_store_if_any, store_file
from ._tables import RowTable
from .worker import load_app

_COLUMNS = ("schedule", "task", "cron", "tz", "catchup", "last firing", "next firing", "note")


def schedules_command(
    target: Annotated[str, typer.Argument(metavar="MODULE:APP", help="Where the app is.")],
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            envvar="CAIRN_STORE",
            show_envvar=True,
            metavar="URL",
            help="Override the app's store (default: the app's own).",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """List the schedules MODULE:APP registers: last firing created, next one due.

    Times are shown in each schedule's own time zone.
    """
    app = load_app(target)
    if store is not None:
        app.use_store(store)
    schedules = app.schedules()
    if not schedules:
        note(f"{target} registers no schedules")
        return
    # Never created here. A store that is not there yet is where the app's first
    # worker will create it: until then, no schedule has fired.
    with opened_store_if_any(app.store_url) as opened:
        if opened is None:
            note(
                f"no store at {_where(app.store_url)} yet: no worker has run, so no "
                f"schedule has fired; `cairn worker {target}` creates it"
            )
            rows = {}
        else:
            rows = {row.name: row for row in opened.list_schedules()}
    moment = SystemClock().now()
    described = [_describe(s, rows.get(s.name), moment) for s in schedules]
    if as_json:
        print_json(described)
        return
    table = RowTable(stdout_console(), _COLUMNS)
    for entry in described:
        table.add_row(
            entry["name"],
            entry["task"],
            entry["cron"],
            entry["tz"],
            entry["catchup"],
            _local(entry["last_fired_at_local"]),
            _local(entry["next_fire_at_local"]),
            entry["note"],
        )
    table.print()


def _where(url: str) -> str:
    """The store's file, or its URL without a password."""
    path = store_file(url)
    if path is not None:
        return str(path.absolute())
    from cairn.store.postgres import redacted  # only a PostgreSQL URL gets here

    return redacted(url)


def _describe(schedule: Schedule, row: ScheduleRecord | None, moment: datetime) -> dict[str, Any]:
    """What is known of one schedule: its spec, and its row's state."""
    zone = schedule.zone
    last = row.last_fired_at if row is not None else None
    if row is None:
        upcoming = schedule.next_after(moment)
        remark = "no worker has ticked it yet"
    elif (row.task_name, row.cron, row.tz) != (schedule.task.name, schedule.cron, schedule.tz):
        upcoming = schedule.next_after(max(row.covered_until, moment))
        remark = (
            f"changed: the store has {row.cron!r} in {row.tz}; a worker switches it "
            "at its next tick"
        )
    else:
        upcoming = schedule.next_after(row.covered_until)
        # Later than on time, and the row not moved past it: no worker ticked it.
        remark = "overdue: is a worker running?" if moment - upcoming > ON_TIME else ""
    return {
        "name": schedule.name,
        "task": schedule.task.name,
        "cron": schedule.cron,
        "tz": schedule.tz,
        "catchup": schedule.catchup,
        "last_fired_at": iso_time(last),
        "last_fired_at_local": None if last is None else last.astimezone(zone).isoformat(),
        "next_fire_at": iso_time(upcoming),
        "next_fire_at_local": upcoming.astimezone(zone).isoformat(),
        "note": remark,
    }


def _local(text: str | None) -> str:
    """An ISO time with its offset, shortened to what a person reads."""
    if text is None:
        return "-"
    return datetime.fromisoformat(text).strftime("%Y-%m-%d %H:%M:%S %z")
