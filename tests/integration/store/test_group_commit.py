"""Group commit on each backend: step writes that meet share one transaction,
each keeps its own fence and its own failure, and nothing is lost.

A queue is made to form deterministically: the test holds the store's write lock
at the database (a second connection's ``BEGIN IMMEDIATE`` on SQLite, ``LOCK
TABLE steps`` on PostgreSQL), so the first write blocks inside its commit and
every later one queues behind it; the test waits until the queue holds them all
(a condition, never a timer), then lets go. The writes queued meanwhile must
then commit as exactly one transaction.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import pytest

from cairn import Cairn, CodecError, Context
from cairn.store import Store, open_store
from cairn.store.groupcommit import Coalescer, PendingStep, coalescer_for
from cairn.store.records import MessageRecord, NewTask, OperationClaim, StepRecord, TaskRecord
from cairn.store.sqlite import SQLiteStore
from cairn.store.stepbatch import CLAIM, MESSAGES, SETTLE, STEP
from tests.servers import wait_until

WAIT = 30.0  # generous: conditions, not timings
NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    # Two connections at most on PostgreSQL, so two commits run at once and
    # the rest must queue.
    url = store_url if store_url.startswith("sqlite") else f"{store_url}?pool_size=2"
    opened = open_store(url)
    yield opened
    opened.close()


def claimed(store: Store, count: int) -> list[TaskRecord]:
    """``count`` new tasks, claimed by this test (each with its own fence)."""
    now = datetime.now(UTC)
    store.enqueue([NewTask(f"gc/{i}", "gc", "{}", "json", batch="gc") for i in range(count)], now)
    tasks = [
        store.claim_next_pending("gc", "tester", now + timedelta(minutes=5), now)
        for _ in range(count)
    ]
    assert all(task is not None for task in tasks)
    return [task for task in tasks if task is not None]


def step_of(task: TaskRecord, seq: int = 1, output: str = "1") -> StepRecord:
    now = datetime.now(UTC)
    return StepRecord(task.id, seq, "step", "s", "completed", output, 1, 1, 1, None, None, now, now)


@contextmanager
def writes_blocked(store: Store) -> Iterator[Callable[[], None]]:
    """Hold the store's write lock from another connection; the callable lets go."""
    if isinstance(store, SQLiteStore):
        lite = sqlite3.connect(store.path, isolation_level=None)
        lite.execute("BEGIN IMMEDIATE")

        def release() -> None:
            lite.execute("ROLLBACK")

        try:
            yield release
        finally:
            lite.close()
        return
    import psycopg

    pg = psycopg.connect(store._conninfo, autocommit=False)  # type: ignore[attr-defined]
    try:
        pg.execute(f"LOCK TABLE {store.schema}.steps IN EXCLUSIVE MODE")  # type: ignore[attr-defined]
        yield pg.rollback
    finally:
        pg.close()


def queued(group: Coalescer) -> int:
    return len(group._queue)


def leading(group: Coalescer) -> int:
    return group._leading


def record_in_threads(
    group: Coalescer, writes: Sequence[tuple[StepRecord, int]]
) -> tuple[list[threading.Thread], dict[str, Any]]:
    """Start one thread per write; its verdict (or error) lands in the dict."""
    verdicts: dict[str, Any] = {}

    def one(step: StepRecord, fence: int) -> None:
        try:
            verdicts[step.task_id] = group.record(step, fence, True)
        except Exception as exc:  # noqa: BLE001 - the verdict under test
            verdicts[step.task_id] = exc

    threads = [threading.Thread(target=one, args=write) for write in writes]
    for thread in threads:
        thread.start()
    return threads, verdicts


def test_threads_share_one_commit_each_fenced_on_its_own(store: Store) -> None:
    """Writes queued behind a blocked commit commit as one transaction; the one
    whose fence moved is told so (False) and writes nothing, the others land."""
    group = coalescer_for(store)
    assert group is not None
    tasks = claimed(store, 8)
    leaders, rest = tasks[: group._max_leading], tasks[group._max_leading :]
    moved = rest[2]
    assert store.release_task(moved.id, moved.fence, datetime.now(UTC))  # its fence moves
    with writes_blocked(store) as release:
        first, verdicts = record_in_threads(group, [(step_of(t), t.fence) for t in leaders])
        assert wait_until(lambda: leading(group) == len(leaders), WAIT)
        later, more = record_in_threads(group, [(step_of(t), t.fence) for t in rest])
        assert wait_until(lambda: queued(group) == len(rest), WAIT)
        release()
        for thread in first + later:
            thread.join(WAIT)
    verdicts.update(more)
    assert (group.batches, group.batched_writes) == (1, len(rest))
    assert verdicts == {t.id: t is not moved for t in tasks}
    for task in tasks:
        assert (1 in store.load_history(task.id)) is (task is not moved)


def test_one_tasks_bad_write_fails_only_that_task(store: Store) -> None:
    """A write the store cannot take (text with a lone surrogate) fails its own
    task with the error the store gives it alone; the writes sharing its
    commit land."""
    group = coalescer_for(store)
    assert group is not None
    tasks = claimed(store, 6)
    leaders, rest = tasks[: group._max_leading], tasks[group._max_leading :]
    bad = rest[1]
    writes = [(step_of(t, output='"\ud800"' if t is bad else "1"), t.fence) for t in rest]
    with writes_blocked(store) as release:
        first, verdicts = record_in_threads(group, [(step_of(t), t.fence) for t in leaders])
        assert wait_until(lambda: leading(group) == len(leaders), WAIT)
        later, more = record_in_threads(group, writes)
        assert wait_until(lambda: queued(group) == len(rest), WAIT)
        release()
        for thread in first + later:
            thread.join(WAIT)
    verdicts.update(more)
    alone = _error_alone(store, writes[1][0], bad.fence)
    assert type(verdicts.pop(bad.id)) is type(alone)
    assert verdicts == {t.id: True for t in tasks if t is not bad}
    for task in tasks:
        assert (1 in store.load_history(task.id)) is (task is not bad)


def test_a_message_the_store_cannot_encode_fails_only_its_own_write(store: Store) -> None:
    """A conversation message the store cannot encode (a lone surrogate), queued
    with other tasks' step writes, fails its own write with the CodecError it
    gets alone; the writes sharing its commit land."""
    group = coalescer_for(store)
    assert group is not None
    tasks = claimed(store, 4 + group._max_leading)
    leaders, rest = tasks[: group._max_leading], tasks[group._max_leading :]
    talker = rest[0]
    conv = store.open_conversation(talker.id, "main", talker.fence)
    assert conv is not None
    content = '{"role": "user", "content": "hi\ud800"}'  # raw, as json.dumps would escape it
    bad = message_of(talker, 0, "hi")._replace(content=content)
    writes: list[tuple[str, int, tuple[Any, ...], int, StepRecord | None]] = [
        ("bad", MESSAGES, (conv, (bad,)), talker.fence, None),
        *((t.id, STEP, (), t.fence, step_of(t)) for t in rest[1:]),
    ]
    with writes_blocked(store) as release:
        first, _verdicts = record_in_threads(group, [(step_of(t), t.fence) for t in leaders])
        assert wait_until(lambda: leading(group) == len(leaders), WAIT)
        later, verdicts = submit_in_threads(group, writes)
        assert wait_until(lambda: queued(group) == len(writes), WAIT)
        release()
        for thread in first + later:
            thread.join(WAIT)
    assert isinstance(verdicts.pop("bad"), CodecError)
    assert verdicts == {t.id: True for t in rest[1:]}
    assert store.load_messages(talker.id, "main", 0, 10) == []


def test_async_writes_share_one_commit_off_the_event_loop(store: Store) -> None:
    """Coroutines' writes queue while the commit thread's commit is blocked (the
    loop keeps running: it is the loop that lets the lock go), then commit as
    one transaction, each with its own verdict."""
    group = coalescer_for(store)
    assert group is not None
    tasks = claimed(store, 6)
    moved = tasks[3]
    assert store.release_task(moved.id, moved.fence, datetime.now(UTC))

    async def main(release: Callable[[], None]) -> list[bool]:
        def write(task: TaskRecord) -> asyncio.Future[bool]:
            return asyncio.ensure_future(group.arecord(step_of(task), task.fence, True))

        async def until(condition: Callable[[], bool]) -> None:
            while not condition():
                await asyncio.sleep(0.001)  # real-sleep-ok: polling; the loop stays live

        writes = [write(tasks[0])]
        await until(lambda: group._helper_leads and queued(group) == 0)  # taken, blocked
        writes += [write(t) for t in tasks[1:]]
        await until(lambda: queued(group) == len(tasks) - 1)
        release()
        return list(await asyncio.gather(*writes))

    with writes_blocked(store) as release:
        verdicts = asyncio.run(asyncio.wait_for(main(release), WAIT))
    assert verdicts == [t is not moved for t in tasks]
    assert (group.batches, group.batched_writes) == (1, len(tasks) - 1)
    for task in tasks:
        assert (1 in store.load_history(task.id)) is (task is not moved)


def test_many_async_tasks_record_every_step(store_url: str) -> None:
    """Thirty async tasks of five steps at concurrency 30, group commit on: every
    task completes with the right result and every step row is in the store."""
    with Cairn(store_url, group_commit=True) as app:

        @app.task
        async def counting(ctx: Context, n: int) -> int:
            total = 0
            for i in range(5):
                total += await ctx.step("s", _plus, n, i)
            return total

        report = app.run_batch(
            "many", counting, [{"n": n} for n in range(30)], concurrency=30, progress=False
        )
        assert report.counts == {"completed": 30}
        for n in range(30):
            task_id = f"many/n={n}"
            assert app.result(task_id) == 5 * n + 10
            assert sorted(app.store.load_history(task_id)) == [1, 2, 3, 4, 5]


def test_group_commit_off_writes_each_step_alone(store_url: str) -> None:
    """``Cairn(group_commit=False)``: steps are written straight through the
    store, and no queue is ever made for it."""
    with Cairn(store_url, group_commit=False) as app:

        @app.task
        def two(ctx: Context) -> int:
            return int(ctx.step("a", lambda: 1) + ctx.step("b", lambda: 2))

        assert app.run(two) == 3
        assert getattr(app.store, "_group_commit", None) is None


def _error_alone(store: Store, step: StepRecord, fence: int) -> BaseException:
    """What the store raises for ``step`` written alone, without group commit."""
    try:
        store.record_step(step, fence, first=True)
    except Exception as exc:  # noqa: BLE001 - the error to compare with
        return exc
    raise AssertionError("the store took text it cannot hold")


async def _plus(n: int, i: int) -> int:
    await asyncio.sleep(0)  # real-sleep-ok: a zero yield, so the tasks interleave
    return n + i


# -- ctx.once's claim and record, and conversation appends ---------------------------------
def message_of(task: TaskRecord, idx: int, text: str) -> MessageRecord:
    content = json.dumps({"role": "user", "content": text})
    return MessageRecord(task.id, "main", idx, "user", content, 5, "message", None, None, NOW)


def submit_in_threads(
    group: Coalescer, writes: Sequence[tuple[str, int, tuple[Any, ...], int, StepRecord | None]]
) -> tuple[list[threading.Thread], dict[str, Any]]:
    """``record_in_threads`` for writes of any kind: (label, kind, args, fence, step)."""
    verdicts: dict[str, Any] = {}

    def one(label: str, kind: int, args: tuple[Any, ...], fence: int, step: Any) -> None:
        try:
            verdicts[label] = group.submit(kind, args, fence, step)
        except Exception as exc:  # noqa: BLE001 - the verdict under test
            verdicts[label] = exc

    threads = [threading.Thread(target=one, args=write) for write in writes]
    for thread in threads:
        thread.start()
    return threads, verdicts


def test_claims_records_and_messages_share_one_commit_each_fenced(store: Store) -> None:
    """Once-claims, once-records and message appends queued behind a blocked
    commit commit as one transaction, each judged by its own row count: a task
    whose fence moved gets False for each of its writes and nothing of it is
    written; a message whose position is already taken by the same message (a
    retried write) is answered by the store's own path, as alone."""
    group = coalescer_for(store)
    assert group is not None
    tasks = claimed(store, 6 + group._max_leading)
    leaders, (settler, claimer, moved, talker, again, many) = (
        tasks[: group._max_leading],
        tasks[group._max_leading :],
    )
    now = datetime.now(UTC)
    assert store.claim_operation("", "k-settle", settler.id, 1, settler.fence, now).claimed
    assert store.claim_operation("", "k-moved-rec", moved.id, 1, moved.fence, now).claimed
    conv: dict[str, int] = {}
    for task in (talker, again, many, moved):
        opened = store.open_conversation(task.id, "main", task.fence)
        assert opened is not None
        conv[task.id] = opened
    assert store.append_message(conv[again.id], message_of(again, 0, "hello"), again.fence)
    assert store.release_task(moved.id, moved.fence, now)  # its fence moves
    entry = StepRecord(settler.id, 1, "op", "k-settle", "completed", "7", 1, 1, 1, None, None,
                       now, now)  # fmt: skip
    moved_entry = entry._replace(task_id=moved.id, name="k-moved-rec")
    several = tuple(message_of(many, i, f"m{i}") for i in range(3))
    writes: list[tuple[str, int, tuple[Any, ...], int, StepRecord | None]] = [
        ("settle", SETTLE, ("", "k-settle", 1, "7"), settler.fence, entry),
        ("claim", CLAIM, ("", "k-claim", claimer.id, 1, now), claimer.fence, None),
        ("moved claim", CLAIM, ("", "k-moved", moved.id, 2, now), moved.fence, None),
        ("moved settle", SETTLE, ("", "k-moved-rec", 1, "7"), moved.fence, moved_entry),
        ("moved message", MESSAGES, (conv[moved.id], (message_of(moved, 0, "x"),)), moved.fence,
         None),
        ("message", MESSAGES, (conv[talker.id], (message_of(talker, 0, "hi"),)), talker.fence,
         None),
        ("retried", MESSAGES, (conv[again.id], (message_of(again, 0, "hello"),)), again.fence,
         None),
    ]  # fmt: skip
    if group.multirow:
        writes.append(("several", MESSAGES, (conv[many.id], several), many.fence, None))
    with writes_blocked(store) as release:
        first, _verdicts = record_in_threads(group, [(step_of(t), t.fence) for t in leaders])
        assert wait_until(lambda: leading(group) == len(leaders), WAIT)
        later, more = submit_in_threads(group, writes)
        assert wait_until(lambda: queued(group) == len(writes), WAIT)
        release()
        for thread in first + later:
            thread.join(WAIT)
    assert (group.batches, group.batched_writes) == (1, len(writes))
    # A claim answered alone (PostgreSQL runs every write of a batch alone once
    # the server refused any of it: here the retried message) is the store's
    # own answer, an OperationClaim.
    answers = {k: v.claimed if isinstance(v, OperationClaim) else v for k, v in more.items()}
    expected = {
        "settle": True, "claim": True, "moved claim": False, "moved settle": False,
        "moved message": False, "message": True, "retried": True, "several": True,
    }  # fmt: skip
    if not group.multirow:
        del expected["several"]
    assert answers == expected
    settled = store.get_operation("", "k-settle")
    assert settled is not None
    assert (settled.status, settled.result) == ("completed", "7")
    claim = store.get_operation("", "k-claim")
    assert claim is not None
    assert (claim.status, claim.task_id) == ("claimed", claimer.id)
    assert store.get_operation("", "k-moved") is None
    moved_op = store.get_operation("", "k-moved-rec")
    assert moved_op is not None
    assert moved_op.status == "claimed"
    assert store.load_messages(moved.id, "main", 0, 10) == []
    assert [m.content for m in store.load_messages(talker.id, "main", 0, 10)] == [
        message_of(talker, 0, "hi").content
    ]
    assert len(store.load_messages(again.id, "main", 0, 10)) == 1
    if group.multirow:
        assert [m.idx for m in store.load_messages(many.id, "main", 0, 10)] == [0, 1, 2]


def test_several_messages_of_a_fenced_out_task_write_none(store_url: str) -> None:
    """A write of several messages whose task's fence moved writes none of them,
    in a batch (SQLite keeps them in a savepoint of their own) and alone."""
    opened = open_store(store_url)
    try:
        group = coalescer_for(opened)
        assert group is not None
        [ours, moved] = claimed(opened, 2)
        conv = opened.open_conversation(moved.id, "main", moved.fence)
        assert conv is not None
        assert opened.release_task(moved.id, moved.fence, datetime.now(UTC))
        messages = tuple(message_of(moved, i, f"m{i}") for i in range(3))
        batch = [
            PendingStep(step_of(ours), ours.fence, True),
            PendingStep(None, moved.fence, False, kind=MESSAGES, args=(conv, messages)),
        ]
        if group.multirow:
            assert group._write(batch) == [True, False]
        assert group.submit(MESSAGES, (conv, messages), moved.fence, None) is False
        assert opened.load_messages(moved.id, "main", 0, 10) == []
    finally:
        opened.close()


def test_once_and_conversations_in_many_tasks_record_everything(store_url: str) -> None:
    """Twenty async tasks and eight threads, each with a ctx.once per round and
    a conversation message per round (group commit on): every operation is
    completed once with its result, and every message is stored once, in order."""
    calls: list[str] = []

    def act(key: str, n: int) -> int:
        calls.append(key)
        return n

    async def aact(key: str, n: int) -> int:
        await asyncio.sleep(0)  # real-sleep-ok: a zero yield, so the tasks interleave
        return act(key, n)

    with Cairn(store_url, group_commit=True) as app:

        @app.task
        async def async_talk(ctx: Context, n: int) -> int:
            conv = ctx.conversation("main")
            total = 0
            for i in range(3):
                total += await ctx.once(f"a{n}-{i}", aact, n)
                conv.append({"role": "user", "content": f"a{n}-{i}"})
            return total

        @app.task
        def sync_talk(ctx: Context, n: int) -> int:
            conv = ctx.conversation("main")
            total = 0
            for i in range(3):
                total += ctx.once(f"s{n}-{i}", act, n)
                conv.append({"role": "user", "content": f"s{n}-{i}"})
            return total

        items = [{"n": n} for n in range(20)]
        assert app.run_batch("a", async_talk, items, concurrency=20, progress=False).counts == {
            "completed": 20
        }
        assert app.run_batch("s", sync_talk, items[:8], concurrency=8, progress=False).counts == {
            "completed": 8
        }
        keys = [f"a{n}-{i}" for n in range(20) for i in range(3)]
        keys += [f"s{n}-{i}" for n in range(8) for i in range(3)]
        assert sorted(calls) == sorted(keys)
        for key in keys:
            op = app.store.get_operation("", key)
            assert op is not None
            assert op.status == "completed"
        for prefix, batch, count in (("a", "a", 20), ("s", "s", 8)):
            for n in range(count):
                task_id = f"{batch}/n={n}"
                assert app.result(task_id) == 3 * n
                stored = app.store.load_messages(task_id, "main", 0, 10)
                assert [json.loads(m.content)["content"] for m in stored] == [
                    f"{prefix}{n}-{i}" for i in range(3)
                ]


@pytest.mark.parametrize("synchronous", ["NORMAL", "FULL"])
def test_group_commit_unsaid_is_on_only_where_a_commit_waits_for_the_disk(
    tmp_path: Path, synchronous: Literal["NORMAL", "FULL"]
) -> None:
    """``Cairn()`` with ``group_commit`` unsaid: SQLite ``FULL`` (each commit an
    fsync) makes the queue and its steps go through it; SQLite ``NORMAL`` writes
    each step straight through the store (sharing a cheap commit cost more than
    it saved, docs/benchmarks.md); ``True`` turns it on there too."""
    url = f"sqlite:///{tmp_path / 'cairn.db'}"
    with Cairn(url, synchronous=synchronous) as app:

        @app.task
        def two(ctx: Context) -> int:
            return int(ctx.step("a", lambda: 1) + ctx.step("b", lambda: 2))

        assert app.run(two) == 3
        made = getattr(app.store, "_group_commit", None)
        assert (made is not None) is (synchronous == "FULL")
    with Cairn(f"sqlite:///{tmp_path / 'on.db'}", group_commit=True) as app:

        @app.task
        def one(ctx: Context) -> int:
            return int(ctx.step("a", lambda: 1))

        assert app.run(one) == 1
        assert getattr(app.store, "_group_commit", None) is not None


def test_group_commit_unsaid_is_on_for_postgresql(pg_url: str) -> None:
    """On PostgreSQL (a commit waits for the server's WAL flush) group commit is
    on when the app does not say."""
    with Cairn(pg_url) as app:

        @app.task
        def one(ctx: Context) -> int:
            return int(ctx.step("a", lambda: 1))

        assert app.run(one) == 1
        assert getattr(app.store, "_group_commit", None) is not None
