"""Conversation messages above the inline limit go to the blob store; rows keep a
hash-checked reference, and every reader gets the message back as it was.

These tests are about a SQLite file's blobs, or cross from SQLite to PostgreSQL;
those for every backend are in ``store/test_conversation_blobs.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cairn import Cairn
from cairn.agent import load_conversation
from cairn.blobs import FileBlobStore, is_ref, parse_ref
from cairn.blobs.in_store import referenced_blobs
from cairn.clock import FakeClock
from cairn.store import admin
from tests.crashes import LEASE, Crash
from tests.integration.store.test_conversation_blobs import KB, big_report, cli, reader


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No store or blob store from the outer environment."""
    for name in ("CAIRN_STORE", "CAIRN_BLOBS", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)


def test_cairn_conversation_reads_offloaded_messages_beside_a_sqlite_file(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Without --blobs, `cairn conversation` on a SQLite store reads offloaded
    messages from the blob store beside the file, as the app wrote them."""
    url = f"sqlite:///{tmp_path / 'cairn.db'}"
    with Cairn(url, clock=clock) as app:
        app.task(name="talk")(reader([False]))
        app.run(app.registered("talk"), task_id="t")
        (row,) = app.store.load_messages("t", "main", 2, 1)
    assert is_ref(row.content)
    assert (tmp_path / "cairn.db-blobs").is_dir()
    shown = cli("conversation", "t", "--store", url, "--jsonl")
    assert shown.exit_code == 0, shown.output
    lines = [json.loads(line) for line in shown.output.splitlines()]
    assert lines[2]["message"]["content"] == big_report(200 * KB)


def test_export_from_sqlite_import_into_postgres_carries_message_blobs(
    tmp_path: Path, clock: FakeClock, pg_url: str
) -> None:
    """A batch whose conversation holds an offloaded message, exported from SQLite
    with `cairn export` and imported into PostgreSQL with `cairn import`, brings its
    blob along: the imported row is a reference, and the task resumes on PostgreSQL
    re-reading the same message."""
    sqlite_url = f"sqlite:///{tmp_path / 'a.db'}"
    a_blobs, pg_blobs = tmp_path / "a-blobs", tmp_path / "pg-blobs"
    crash = [True]
    with Cairn(sqlite_url, clock=clock, lease=LEASE, blobs=str(a_blobs)) as app:
        task = app.task(name="talk")(reader(crash))
        with pytest.raises(Crash):
            app.run_batch("daily", task, [{}], concurrency=1, progress=False)
    export = tmp_path / "daily.cairn"
    out = cli(
        "export", "--batch", "daily", str(export), "--store", sqlite_url, "--blobs", str(a_blobs)
    )
    assert out.exit_code == 0, out.output
    assert sum(1 for line in export.read_text().splitlines() if '"blob"' in line) == 1
    got = cli("import", str(export), "--store", pg_url, "--blobs", str(pg_blobs))
    assert got.exit_code == 0, got.output

    crash[0] = False
    with Cairn(pg_url, clock=clock, blobs=str(pg_blobs)) as pg:
        (task_id,) = [t.id for t in admin(pg.store).list_tasks(batch="daily")]
        (row,) = pg.store.load_messages(task_id, "main", 2, 1)
        assert is_ref(row.content)
        assert parse_ref(row.content).sha256 in referenced_blobs(admin(pg.store))
        report = pg.run_batch("daily", pg.task(name="talk")(reader(crash)), progress=False)
        view = load_conversation(pg.store, task_id, blobs=FileBlobStore(pg_blobs))
        rows = pg.store.load_messages(task_id, "main", 0, 9)
    assert report.ok
    assert view is not None
    assert view.messages[2]["content"] == big_report(200 * KB)
    assert len(rows) == 4
    assert FileBlobStore(pg_blobs).has(parse_ref(row.content).sha256)
