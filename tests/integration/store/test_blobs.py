"""Large values go to the blob store; the record keeps a small, hash-checked reference.

Every test runs on each backend (``url``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn import Cairn, Context, TaskFailed
from cairn.blobs import FileBlobStore, is_ref, parse_ref
from cairn.clock import FakeClock
from cairn.testing import set_fault_hook
from tests.crashes import LEASE, PAST_LEASE, Crash, crash_before, logged, second_process
from tests.crashes import url as url  # a fixture: pytest finds it by this name

MB = 1024 * 1024


def report_rows(n: int) -> list[dict[str, Any]]:
    """Rows like a report API returns, about 100 bytes each when encoded."""
    return [{"id": i, "account": f"acct-{i:08d}", "spend": i * 1.25, "ok": True} for i in range(n)]


@pytest.fixture
def blobs_dir(tmp_path: Path) -> Path:
    return tmp_path / "blobs"


@pytest.fixture
def first(url: str, clock: FakeClock, blobs_dir: Path) -> Iterator[Cairn]:
    with Cairn(url, clock=clock, lease=LEASE, blobs=str(blobs_dir)) as app:
        yield app


def big_then_small(calls: list[str], rows: int) -> Any:
    def task(ctx: Context) -> int:
        data: list[Any] = ctx.step("fetch", logged(calls, "fetch", report_rows(rows)))
        ctx.step("count", logged(calls, "count", len(data)))
        return len(data)

    return task


@pytest.mark.slow  # 20 MB through each store: 10-20 s
def test_a_20_mb_step_output_goes_to_blobs_and_resumes_from_there(
    first: Cairn, url: str, clock: FakeClock, blobs_dir: Path
) -> None:
    """A step returning ~20 MB is written to the blob store; its checkpoint holds only a
    reference of a few hundred bytes; after a crash the resumed run gets the same rows
    back without calling the step again."""
    calls: list[str] = []
    rows = 20 * MB // 68
    first.task(name="report")(big_then_small(calls, rows))
    set_fault_hook(first, crash_before("count"))
    with pytest.raises(Crash):
        first.run(first.registered("report"), task_id="r1")

    output = first.store.load_history("r1")[1].output
    assert output is not None
    assert is_ref(output)
    assert len(output) < 300
    ref = parse_ref(output)
    assert ref.size > 20 * 1_000_000
    stored = FileBlobStore(blobs_dir).get(ref.sha256)
    assert hashlib.sha256(stored).hexdigest() == ref.sha256

    clock.advance(PAST_LEASE)
    seen: list[int] = []
    with second_process(url, clock, blobs=str(blobs_dir)) as other:

        def task(ctx: Context) -> int:
            data: list[Any] = ctx.step("fetch", logged(calls, "fetch", []))
            seen.append(len(data))
            assert data[-1] == report_rows(rows)[-1]
            ctx.step("count", logged(calls, "count", len(data)))
            return len(data)

        other.task(name="report")(task)
        assert other.run(other.registered("report"), task_id="r1") == rows
    assert calls == ["fetch", "count"]
    assert seen == [rows]


def test_values_up_to_the_inline_limit_stay_in_the_record(
    url: str, clock: FakeClock, blobs_dir: Path
) -> None:
    """With inline_limit=1000, an output of 1000 characters stays inline and one of 1001
    goes to the blob store; both come back equal on the first run and on replay."""
    with Cairn(url, clock=clock, blobs=str(blobs_dir), inline_limit=1000) as app:

        @app.task
        def sizes(ctx: Context) -> list[int]:
            small = ctx.step("small", lambda: "a" * 998)  # 1000 characters with quotes
            large = ctx.step("large", lambda: "b" * 999)
            return [len(small), len(large)]

        assert app.run(sizes, task_id="s") == [998, 999]
        history = app.store.load_history("s")
        assert not is_ref(history[1].output)
        assert is_ref(history[2].output)
        assert app.run(sizes, task_id="s") == [998, 999]  # the recorded result, offloaded too
    assert len(list(FileBlobStore(blobs_dir).blobs())) == 1


def test_a_corrupt_blob_fails_the_task_naming_task_step_and_uri(
    first: Cairn, url: str, clock: FakeClock, blobs_dir: Path
) -> None:
    """If a blob's bytes no longer match the recorded sha256, replay stops with an error
    that names the task, the step and the blob's URI, and the step is not called again."""
    calls: list[str] = []
    first.task(name="report")(big_then_small(calls, 5000))
    set_fault_hook(first, crash_before("count"))
    with pytest.raises(Crash):
        first.run(first.registered("report"), task_id="r2")
    ref = parse_ref(first.store.load_history("r2")[1].output or "")
    path = blobs_dir / ref.sha256[:2] / ref.sha256
    path.write_bytes(path.read_bytes().replace(b"acct-", b"ACCT-", 1))

    clock.advance(PAST_LEASE)
    with second_process(url, clock, blobs=str(blobs_dir)) as other:
        other.task(name="report")(big_then_small(calls, 5000))
        with pytest.raises(TaskFailed) as failed:
            other.run(other.registered("report"), task_id="r2")
    message = str(failed.value)
    assert "BlobCorrupt" in message
    assert "'r2'" in message
    assert "step 'fetch'" in message
    assert ref.uri in message
    assert calls == ["fetch"]


def test_a_missing_blob_fails_the_task_naming_task_step_and_uri(
    first: Cairn, url: str, clock: FakeClock, blobs_dir: Path
) -> None:
    """If the blob a record points at is gone, replay stops with BlobMissing naming the
    task, the step and the URI, instead of calling the step again."""
    calls: list[str] = []
    first.task(name="report")(big_then_small(calls, 5000))
    set_fault_hook(first, crash_before("count"))
    with pytest.raises(Crash):
        first.run(first.registered("report"), task_id="r3")
    ref = parse_ref(first.store.load_history("r3")[1].output or "")
    FileBlobStore(blobs_dir).delete(ref.sha256)

    clock.advance(PAST_LEASE)
    with second_process(url, clock, blobs=str(blobs_dir)) as other:
        other.task(name="report")(big_then_small(calls, 5000))
        with pytest.raises(TaskFailed) as failed:
            other.run(other.registered("report"), task_id="r3")
    message = str(failed.value)
    assert "BlobMissing" in message
    assert "'r3'" in message
    assert "step 'fetch'" in message
    assert ref.uri in message
    assert calls == ["fetch"]


def test_operation_results_and_task_results_are_offloaded_too(
    url: str, clock: FakeClock, blobs_dir: Path
) -> None:
    """A ctx.once result and a task result above the limit are stored as references and
    come back whole; the operation is called once."""
    called: list[str] = []

    def charge(key: str) -> str:
        called.append(key)
        return "r" * 5000

    with Cairn(url, clock=clock, blobs=str(blobs_dir), inline_limit=1024) as app:

        @app.task
        def pay(ctx: Context) -> str:
            receipt = ctx.once("charge-1", charge)
            return receipt + "!" * 2000

        assert app.run(pay, task_id="p") == "r" * 5000 + "!" * 2000
        assert app.run(pay, task_id="p") == "r" * 5000 + "!" * 2000
        op = app.store.get_operation("", "charge-1")
        task = app.store.get_task("p")
    assert op is not None
    assert is_ref(op.result)
    assert task is not None
    assert is_ref(task.result)
    assert called == ["charge-1"]
