"""A recorded value changed on disk is reported as corruption, never replayed.

Each history entry is written with a checksum of its kind, name and output
(schema 6), checked when the task's history is loaded; an operation's result
and each message of a conversation carry one too (schema 10), checked when
they are read back, and an import writes them for what it brings in. A same-length edit in
place (the SQL an intruder or a bad tool would run, on both stores) and 16
random bytes written over a recorded value in the SQLite file itself both make
the task fail with ``RecordCorrupt`` naming the task and the position, without
the value reaching the task's code.
"""

from __future__ import annotations

import io
import random
import sqlite3
import string
from pathlib import Path

import pytest

from cairn import Cairn, Context, StoreError, TaskFailed
from cairn.clock import FakeClock
from cairn.portable.transfer import export_batch, import_batch
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


# -- operation results and messages (schema 10) ------------------------------------------
def _effects_app(url: str, charges: list[str], seen: list[str]) -> tuple[Cairn, TaskDef[..., str]]:
    """A task that charges once (``ctx.once``), then keeps a conversation."""
    app = Cairn(url, clock=FakeClock())

    def charge(_op: object, item: str) -> str:
        charges.append(item)
        return SECRET

    @app.task
    def pay(ctx: Context, item: str = "a") -> str:
        receipt: str = ctx.once("charge-1", charge, item)
        seen.append(receipt)
        conv = ctx.conversation("notes")
        conv.append({"role": "user", "content": SECRET})
        return ctx.step("done", lambda: receipt.upper())

    return app, pay


def _corrupt_error(
    url: str, charges: list[str], seen: list[str], task_id: str = "t", **args: str
) -> str:
    """Run the task again: it must fail with RecordCorrupt, the edited value
    never handed to the task's code and the charge not made again."""
    app, pay = _effects_app(url, charges, seen)
    with app, pytest.raises(TaskFailed) as failed:
        app.run(pay, task_id=task_id, **args)
    error = failed.value.error
    assert error is not None
    assert error["type"] == "cairn.errors.RecordCorrupt", error
    assert charges == ["a"]
    assert all(value == SECRET for value in seen)
    return str(error["message"])


def _paid(url: str, charges: list[str], seen: list[str]) -> None:
    app, pay = _effects_app(url, charges, seen)
    with app:
        assert app.run(pay, task_id="t") == SECRET.upper()
    assert charges == ["a"]


def test_an_operation_result_edited_in_place_is_corruption(store_url: str) -> None:
    """The recorded result of a completed ``ctx.once`` changed in place to
    another valid value of the same length: the task run again fails with
    RecordCorrupt naming the key and its position; the charge is not made
    again and the forged receipt never reaches the task's code."""
    charges: list[str] = []
    seen: list[str] = []
    _paid(store_url, charges, seen)
    forged = '"' + "X" * len(SECRET) + '"'
    _sql(store_url, "UPDATE operations SET result = ? WHERE key = 'charge-1'", forged)
    _retry(store_url)
    message = _corrupt_error(store_url, charges, seen)
    assert "task 't'" in message
    assert "'charge-1' at position 1 is corrupt" in message


def test_a_message_edited_in_place_is_corruption(store_url: str) -> None:
    """A stored message of a conversation changed in place (same length): the
    task resumed fails with RecordCorrupt naming the conversation and the
    message, instead of resuming the agent with a context it never had."""
    charges: list[str] = []
    seen: list[str] = []
    _paid(store_url, charges, seen)
    forged = b"u" + b"X" * len(SECRET)
    _sql(store_url, "UPDATE messages SET content = ? WHERE idx = 0", forged)
    _retry(store_url)
    message = _corrupt_error(store_url, charges, seen)
    assert "message 0 of conversation 'notes' is corrupt" in message


def test_values_written_before_schema_10_are_not_checked(store_url: str) -> None:
    """A result and a message without a checksum (as a store upgraded from
    schema 9 holds them) replay as they are: no false alarm on old records."""
    charges: list[str] = []
    seen: list[str] = []
    _paid(store_url, charges, seen)
    _sql(store_url, "UPDATE operations SET checksum = NULL")
    _sql(store_url, "UPDATE messages SET checksum = NULL")
    _retry(store_url)
    app, pay = _effects_app(store_url, charges, seen)
    with app:
        assert app.run(pay, task_id="t") == SECRET.upper()
    assert charges == ["a"]


@pytest.mark.parametrize("table", ["steps", "operations", "messages"])
def test_an_imported_value_is_checked_like_one_written_here(table: str, tmp_path: Path) -> None:
    """A batch exported and imported into another store: its entries, results
    and messages carry checksums there (worked out by the import), so an
    edit in place after the import is found as corruption too."""
    charges: list[str] = []
    seen: list[str] = []
    source_url = f"sqlite:///{tmp_path / 'source.db'}"
    app, pay = _effects_app(source_url, charges, seen)
    with app:
        app.run_batch("b", pay, [{"item": "a"}])
    assert charges == ["a"]
    out = io.StringIO()
    target_url = f"sqlite:///{tmp_path / 'target.db'}"
    with Cairn(source_url) as source:
        export_batch(source.store, None, "b", out)
    with Cairn(target_url) as target:
        import_batch(target.store, None, out.getvalue().splitlines(keepends=True))
    forged_text = '"' + "X" * len(SECRET) + '"'
    edits = {
        "steps": ("UPDATE steps SET output = ? WHERE name = 'done'", '"' + "Y" * len(SECRET) + '"'),
        "operations": ("UPDATE operations SET result = ?", forged_text),
        "messages": ("UPDATE messages SET content = ?", b"u" + b"X" * len(SECRET)),
    }
    _sql(target_url, *edits[table])
    (task_id,) = _task_ids(target_url)
    _sql(target_url, "UPDATE tasks SET status = 'pending', result = NULL")
    _corrupt_error(target_url, charges, seen, task_id, item="a")


def _task_ids(url: str) -> list[str]:
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        return [row[0] for row in conn.execute("SELECT id FROM tasks")]
