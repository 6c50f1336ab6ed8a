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

from cairn import Cairn, Context, StoreError, TaskFailed
from cairn.clock import FakeClock
from cairn.store.driver_errors import sqlite_error
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


@pytest.mark.parametrize("noise", ["letters", "bytes"])
def test_random_bytes_written_into_the_file_are_corruption(noise: str, tmp_path: Path) -> None:
    """16 random bytes (seeded: ASCII letters, which still read as text, or bytes
    from 0x80 up, which do not) written over the recorded value inside the
    SQLite file itself, with every page checkpointed into it: the task run
    again fails with RecordCorrupt naming the position, not with the damaged
    value and not with the driver's decoding error."""
    path = tmp_path / "c.db"
    url = f"sqlite:///{path}"
    _recorded(url)
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    at = data.find(SECRET.encode())
    assert at > 0
    rng = random.Random(34)
    if noise == "letters":
        data[at + 4 : at + 20] = bytes(rng.choices(string.ascii_letters.encode(), k=16))
    else:
        data[at + 4 : at + 20] = bytes(rng.randrange(0x80, 0x100) for _ in range(16))
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


def test_text_sqlite_cannot_decode_elsewhere_is_said_to_be_damage(tmp_path: Path) -> None:
    """Outside a history (a task row read for a claim, say), text that is not
    UTF-8 is one line saying the file was changed on disk and how to recover,
    not the driver's bare "refused a statement"."""
    raised = sqlite3.OperationalError("Could not decode to UTF-8 column 'result' with text 'x'")
    error = sqlite_error(raised, tmp_path / "c.db", "", 5.0)
    assert isinstance(error, StoreError)
    assert "holds text that is not valid UTF-8" in str(error)
    assert "changed on disk or is damaged" in str(error)
    assert "Restore it from a backup" in str(error)
