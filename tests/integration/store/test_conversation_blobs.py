"""Conversation messages above the inline limit go to the blob store; rows keep a
hash-checked reference, and every reader gets the message back as it was.

Every test runs on each backend (``store_url``).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from cairn import Cairn, Context, TaskFailed
from cairn.agent import iter_history, load_conversation, user
from cairn.blobs import FileBlobStore, is_ref, parse_ref
from cairn.cli import app as cli_app
from cairn.clock import FakeClock
from cairn.errors import BlobCorrupt, BlobMissing
from cairn.store.sqlbase import SQLStore
from tests.crashes import LEASE, PAST_LEASE, Crash, second_process
from tests.integration.store.conftest import Backend

KB = 1024
SYSTEM = "You read reports and answer briefly."


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No store or blob store from the outer environment."""
    for name in ("CAIRN_STORE", "CAIRN_BLOBS", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def blobs_dir(tmp_path: Path) -> Path:
    return tmp_path / "blobs"


def cli(*args: str) -> Result:
    """Run ``cairn ARGS`` in-process."""
    return CliRunner().invoke(cli_app, list(args))


def big_report(size: int, tag: str = "a") -> str:
    """About ``size`` bytes of report text, lines that differ (so zlib cannot hide them)."""
    lines, total, i = [], 0, 0
    while total < size:
        line = f"{tag}-line {i}: account acct-{i * 7919 % 1000003:07d} spent {i * 1.37:.2f}\n"
        lines.append(line)
        total += len(line)
        i += 1
    return "".join(lines)


def reader(crash: list[bool], size: int = 200 * KB) -> Any:
    """A task that appends a 200 KB tool output between small messages; it 'dies'
    after the big append while ``crash[0]`` is set."""

    def talk(ctx: Context) -> list[dict[str, Any]]:
        conv = ctx.conversation("main", system=SYSTEM)
        conv.append(user("Summarize the attached report."))
        conv.append(user(big_report(size)))
        if crash[0]:
            raise Crash("the process dies after the big append")
        conv.append({"role": "assistant", "content": "Spend is up 4%."})
        return conv.messages

    return talk


def stored_sizes(app: Cairn) -> list[int]:
    """The bytes of every stored message's content column."""
    store = app.store
    assert isinstance(store, SQLStore)  # the test reads the rows themselves
    rows = store._exec("SELECT length(content) FROM messages").rows
    return [int(r[0]) for r in rows]


def test_a_200_kb_message_goes_to_blobs_and_the_conversation_resumes_from_there(
    store_url: str, clock: FakeClock, blobs_dir: Path
) -> None:
    """A 200 KB message is written to the blob store before its row; the row holds a
    reference of a few hundred bytes. After a crash the resumed task re-reads the
    same message (no NonDeterminismError, no second row), its restored context is
    the one it had, and the archive readers outside the task see it whole."""
    crash = [True]
    expected = big_report(200 * KB)
    with Cairn(store_url, clock=clock, lease=LEASE, blobs=str(blobs_dir)) as app:
        app.task(name="talk")(reader(crash))
        with pytest.raises(Crash):
            app.run(app.registered("talk"), task_id="t")
        (row,) = app.store.load_messages("t", "main", 2, 1)
        assert is_ref(row.content)
        assert max(stored_sizes(app)) < 300
    ref = parse_ref(row.content)
    data = FileBlobStore(blobs_dir).get(ref.sha256)
    assert hashlib.sha256(data).hexdigest() == ref.sha256
    assert json.loads(data) == {"role": "user", "content": expected}

    crash[0] = False
    clock.advance(PAST_LEASE)
    restored: list[Any] = []
    with second_process(store_url, clock, blobs=str(blobs_dir)) as other:

        def talk(ctx: Context) -> list[dict[str, Any]]:
            restored.append(ctx.conversation("main", system=SYSTEM).restored)
            messages: list[dict[str, Any]] = reader(crash)(ctx)
            return messages

        other.task(name="talk")(talk)
        messages = other.run(other.registered("talk"), task_id="t")
        assert [len(r.content) < 300 for r in other.store.load_messages("t", "main", 0, 9)] == [
            True,
            True,
            True,
            True,
        ]
        view = load_conversation(other.store, "t", blobs=FileBlobStore(blobs_dir))
        archived = list(iter_history(other.store, "t", "main", blobs=FileBlobStore(blobs_dir)))
    assert [m["content"] for m in restored[0]] == [
        SYSTEM,
        "Summarize the attached report.",
        expected,
    ]
    assert [m["content"] for m in messages][2] == expected
    assert view is not None
    assert view.messages == messages
    assert [s.message for s in archived] == messages


def test_messages_up_to_the_inline_limit_stay_in_the_row(
    store_url: str, clock: FakeClock, blobs_dir: Path
) -> None:
    """With inline_limit=1000, a message whose JSON is 1000 characters stays inline
    and one of 1001 goes to the blob store; both read back equal."""
    with Cairn(store_url, clock=clock, blobs=str(blobs_dir), inline_limit=1000) as app:
        small = user("s" * (1000 - len('{"role":"user","content":""}')))
        large = user("l" * (1001 - len('{"role":"user","content":""}')))

        @app.task
        def talk(ctx: Context) -> int:
            conv = ctx.conversation("main")
            conv.extend([small, large])
            return len(conv.messages)

        assert app.run(talk, task_id="t") == 2
        rows = app.store.load_messages("t", "main", 0, 9)
        view = load_conversation(app.store, "t", blobs=FileBlobStore(blobs_dir))
    assert [is_ref(r.content) for r in rows] == [False, True]
    assert view is not None
    assert view.messages == [small, large]
    assert len(list(FileBlobStore(blobs_dir).blobs())) == 1


def chatter(size: int) -> Any:
    """A task that appends 12 large notes to a small-threshold conversation,
    compacting after each; it 'dies' at the end the first time."""
    crashed: list[bool] = []

    def task(ctx: Context) -> dict[str, Any]:
        conv = ctx.conversation("main", system=SYSTEM, threshold=2000, keep_tail=600)
        for i in range(12):
            conv.append(user(f"note {i}: see plan-{i}.md\n" + big_report(size, tag=f"n{i}")))
            conv.compact()
        result = {
            "history": [(h.idx, h.kind, h.message) for h in conv.history()],
            "active": conv.messages,
            "summary": conv.summary,
        }
        if not crashed:
            crashed.append(True)
            raise Crash("the process dies after the last compaction")
        return result

    return task


def test_compacted_large_messages_stay_in_the_archive_and_replay_identically(
    store_url: str, clock: FakeClock, blobs_dir: Path
) -> None:
    """With messages (and summaries) above the inline limit and several compactions,
    every stored row beyond the limit is a reference; the resumed task replays to the
    same history, active context and summary; the archive outside the task reads
    every message ever appended, the summarized head included."""
    task = chatter(2 * KB)
    with Cairn(store_url, clock=clock, lease=LEASE, blobs=str(blobs_dir), inline_limit=KB) as app:
        app.task(name="chatter")(task)
        with pytest.raises(Crash):
            app.run(app.registered("chatter"), task_id="c")
        rows = app.store.load_messages("c", "main", 0, 100)
    kinds = [r.kind for r in rows]
    assert kinds.count("summary") >= 3
    assert all(is_ref(r.content) for r in rows if r.kind == "message" and r.idx > 0)

    clock.advance(PAST_LEASE)
    with second_process(store_url, clock, blobs=str(blobs_dir), inline_limit=KB) as other:
        other.task(name="chatter")(task)
        result = other.run(other.registered("chatter"), task_id="c")
        again = other.store.load_messages("c", "main", 0, 100)
        archive = list(iter_history(other.store, "c", "main", blobs=FileBlobStore(blobs_dir)))
    assert len(again) == len(rows)  # nothing written twice
    assert [(s.idx, s.kind, s.message) for s in archive] == [tuple(h) for h in result["history"]]
    notes = [s.message["content"] for s in archive if s.kind == "message"][1:]
    assert len(notes) == 12
    assert notes[0].startswith("note 0: see plan-0.md\nn0-line 0:")
    assert "plan-11.md" in result["active"][-1]["content"]
    assert result["summary"] is not None


def crashed_after_big_append(store_url: str, clock: FakeClock, blobs_dir: Path) -> str:
    """Run the reader until it dies after its big append; the big row's reference."""
    with Cairn(store_url, clock=clock, lease=LEASE, blobs=str(blobs_dir)) as app:
        app.task(name="talk")(reader([True]))
        with pytest.raises(Crash):
            app.run(app.registered("talk"), task_id="t")
        (row,) = app.store.load_messages("t", "main", 2, 1)
    return row.content


def test_a_corrupt_message_blob_is_named_by_task_conversation_index_and_uri(
    store_url: str, clock: FakeClock, blobs_dir: Path
) -> None:
    """If the blob of a message no longer matches its sha256, resuming the task fails
    with BlobCorrupt naming the task, the conversation, the message index and the
    blob's URI, and so does reading the conversation outside the task."""
    ref = parse_ref(crashed_after_big_append(store_url, clock, blobs_dir))
    path = blobs_dir / ref.sha256[:2] / ref.sha256
    path.write_bytes(path.read_bytes().replace(b"a-line", b"A-LINE", 1))

    clock.advance(PAST_LEASE)
    with second_process(store_url, clock, blobs=str(blobs_dir)) as other:
        other.task(name="talk")(reader([False]))
        with pytest.raises(TaskFailed) as failed:
            other.run(other.registered("talk"), task_id="t")
        with pytest.raises(BlobCorrupt) as outside:
            load_conversation(other.store, "t", blobs=FileBlobStore(blobs_dir))
    for message in (str(failed.value), str(outside.value)):
        assert "'t'" in message
        assert "conversation 'main', message 2" in message
        assert ref.uri in message
    assert "BlobCorrupt" in str(failed.value)


def test_a_missing_message_blob_is_named_by_task_conversation_index_and_uri(
    store_backend: Backend, clock: FakeClock, blobs_dir: Path
) -> None:
    """If a message's blob is gone, resuming fails with BlobMissing naming the task,
    the conversation, the message index and the URI; `cairn conversation` says the
    same in one line and exits 2; reading without any blob store says to pass one
    (on a store that is not a file: a file-based one has blobs beside it by default)."""
    store_url = store_backend.url
    ref = parse_ref(crashed_after_big_append(store_url, clock, blobs_dir))
    FileBlobStore(blobs_dir).delete(ref.sha256)

    clock.advance(PAST_LEASE)
    with second_process(store_url, clock, blobs=str(blobs_dir)) as other:
        other.task(name="talk")(reader([False]))
        with pytest.raises(TaskFailed) as failed:
            other.run(other.registered("talk"), task_id="t")
    message = str(failed.value)
    assert "BlobMissing" in message
    assert "task 't', conversation 'main', message 2" in message
    assert ref.uri in message

    shown = cli("conversation", "t", "--store", store_url, "--blobs", str(blobs_dir))
    assert shown.exit_code == 2
    assert "conversation 'main', message 2" in shown.output
    assert ref.sha256 in shown.output.replace("\n", "")

    if not store_backend.capabilities.file_based:
        with Cairn(store_url) as plain, pytest.raises(BlobMissing) as unconfigured:
            load_conversation(plain.store, "t")
        assert "no blob store is configured" in str(unconfigured.value)


def age_blobs(blobs_dir: Path) -> None:
    """Make every blob two days old: past gc's grace period."""
    old = time.time() - 2 * 86400
    for path in blobs_dir.rglob("*"):
        if path.is_file():
            os.utime(path, (old, old))


def test_gc_keeps_message_blobs_and_deletes_unreferenced_ones(
    store_url: str, clock: FakeClock, blobs_dir: Path
) -> None:
    """`cairn gc` counts a blob referenced by a conversation message as referenced on
    either backend; an old blob nothing refers to is deleted."""
    ref = parse_ref(crashed_after_big_append(store_url, clock, blobs_dir))
    store = FileBlobStore(blobs_dir)
    orphan = b"nothing refers to this"
    orphan_sha = hashlib.sha256(orphan).hexdigest()
    store.put(orphan_sha, orphan)
    age_blobs(blobs_dir)

    done = cli("gc", "--store", store_url, "--blobs", str(blobs_dir))
    assert done.exit_code == 0, done.output
    assert "deleted 1 blob(s)" in done.output
    assert "kept 1 referenced" in done.output
    assert {b.sha256 for b in store.blobs()} == {ref.sha256}
