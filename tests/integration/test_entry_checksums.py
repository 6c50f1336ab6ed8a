"""A recorded value changed on disk is reported as corruption, never replayed.

Each history entry is written with a checksum of its kind, name and output
(schema 6), checked when the task's history is loaded. A same-length edit in
place (the SQL an intruder or a bad tool would run, on both stores) and 16
random bytes written over a recorded value in the SQLite file itself both make
the task fail with ``RecordCorrupt`` naming the task and the position, without
the value reaching the task's code.
"""

from __future__ import annotations

import random
import sqlite3
import string
from pathlib import Path

import pytest

from cairn import Cairn, Context, TaskFailed
from cairn.clock import FakeClock
from cairn.task import TaskDef

SECRET = "the-recorded-value-0123456789"


def _app(url: str, seen: list[str]) -> tuple[Cairn, TaskDef[..., str]]:
    app = Cairn(url, clock=FakeClock())

    @app.task
    def job(ctx: Context) -> str:
        first = ctx.step("fetch", lambda: SECRET)
        seen.append(first)
        return ctx.step("use", lambda: first.upper())

    return app, job


def _fails_as_corrupt(url: str, seen: list[str]) -> str:
    """Run the task again; it must fail with RecordCorrupt at position 1, the
    edited value never handed to the task's code."""
    app, job = _app(url, seen)
    with app, pytest.raises(TaskFailed) as failed:
        app.run(job, task_id="t")
    assert seen == [SECRET]  # only the first run's, which recorded it
    error = failed.value.error
    assert error is not None
    assert error["type"] == "cairn.errors.RecordCorrupt"
    message = str(error["message"])
    assert "task 't'" in message
    assert "'fetch' at position 1 is corrupt" in message
    assert "It was not replayed" in message
    return message


def _recorded(url: str) -> None:
    seen: list[str] = []
    app, job = _app(url, seen)
    with app:
        assert app.run(job, task_id="t") == SECRET.upper()
    assert seen == [SECRET]


def test_a_same_length_edit_in_place_is_corruption(store_url: str) -> None:
    """The recorded output of step 1 changed in place to a value of the same
    length (valid JSON, so nothing but the checksum can tell): the task run
    again fails with RecordCorrupt naming it; on both stores."""
    _recorded(store_url)
    forged = '"' + "X" * len(SECRET) + '"'
    _sql(store_url, "UPDATE steps SET output = ? WHERE task_id = 't' AND seq = 1", forged)
    _retry(store_url)
    _fails_as_corrupt(store_url, [SECRET])


def test_random_bytes_written_into_the_file_are_corruption(tmp_path: Path) -> None:
    """16 random printable bytes (seeded) written over the recorded value inside
    the SQLite file itself, with every page checkpointed into it: the task run
    again fails with RecordCorrupt, not with the damaged value."""
    path = tmp_path / "c.db"
    url = f"sqlite:///{path}"
    _recorded(url)
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    at = data.find(SECRET.encode())
    assert at > 0
    noise = random.Random(34).choices(string.ascii_letters.encode(), k=16)
    data[at + 4 : at + 20] = bytes(noise)
    path.write_bytes(bytes(data))
    _retry(url)
    _fails_as_corrupt(url, [SECRET])


def _retry(url: str) -> None:
    """Make the completed task run again from its record (as `cairn rerun` would
    not: it keeps the entries before its fork point, which is the point here)."""
    _sql(url, "UPDATE tasks SET status = 'pending', result = NULL WHERE id = 't'")


def _sql(url: str, statement: str, *params: object) -> None:
    """Run one statement on the store's database with the driver itself, as a
    tool outside cairn would."""
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute(statement, params)
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET search_path TO cairn")
        conn.execute(statement.replace("?", "%s"), params)
