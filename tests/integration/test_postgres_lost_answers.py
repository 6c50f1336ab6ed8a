"""A write whose commit landed but whose answer never came back: the network
drops between PostgreSQL and cairn at the worst moment.

cairn runs every statement again on a new connection when its connection is
lost (workers.md, "PostgreSQL restarted": each write is idempotent, or finds
what its first try wrote). To make that moment happen on purpose, cairn talks
to the shared server through a TCP proxy of the test's own on 127.0.0.1, which
forwards every byte, except that once, after cairn has sent a chosen statement
(its text, and a parameter where the text is not enough), it cuts both
connections instead of passing on the server's answer to it: the server
committed, and cairn never heard. ``on_cut`` lets a test make something happen
meanwhile, before cairn tries again. Effects are counted by the functions
themselves, here in the test process.

The first tests have a database each; the rest share one (``shared_db``),
each keeping to task ids, batches, keys and limits of its own.
"""

from __future__ import annotations

import io
import json
import os
import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager, suppress
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from typer.testing import CliRunner

from cairn import Cairn, Context, LeaseLost, Rate, TaskDef, TaskFailed, TaskWaiting
from cairn.admin import resolve, send_signal
from cairn.admin.actions import CANCEL, RETRY, Action, apply_to_task
from cairn.cli import app as cli
from cairn.clock import FakeClock
from cairn.engine.once import OnDoubt
from cairn.errors import StoreUnavailable
from cairn.portable import export_batch, import_batch
from cairn.store import Store, admin, open_store
from cairn.store.records import NewTask, ScheduleRecord, StepRecord, TaskRecord
from cairn.testing import Fault, FaultPlan, InjectedCrash
from tests.conftest import postgres_admin_url, with_database

PUMP_BYTES = 65536


class AnswerDroppingProxy:
    """A TCP proxy to ``upstream`` that, once, after a client sent bytes holding
    ``statement`` (each of its parts, when it is a tuple: a statement's text and
    a parameter, say), cuts that client's connection (both ways) at the
    server's next answer holding ``answer``, instead of forwarding it."""

    def __init__(
        self, upstream: tuple[str, int], statement: bytes | tuple[bytes, ...], answer: bytes
    ) -> None:
        self._upstream = upstream
        self._statement = (statement,) if isinstance(statement, bytes) else statement
        self._answer = answer
        self._lock = threading.Lock()
        self._armed: set[int] = set()  # ids of the client sockets that sent the statement
        self.dropped = 0
        # Called once the answer is held back, before the client hears of the
        # cut: what happens "meanwhile", before the client's try again.
        self.on_cut: Callable[[], None] | None = None
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False

    def __enter__(self) -> AnswerDroppingProxy:
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closed = True
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._upstream)
            for source, sink, upward in ((client, server, True), (server, client, False)):
                threading.Thread(
                    target=self._pump, args=(source, sink, client, server, upward), daemon=True
                ).start()

    def _pump(
        self,
        source: socket.socket,
        sink: socket.socket,
        client: socket.socket,
        server: socket.socket,
        upward: bool,
    ) -> None:
        with closing(source):
            while True:
                try:
                    data = source.recv(PUMP_BYTES)
                except OSError:
                    data = b""
                cut = bool(data) and self._cut(data, client, upward)
                if cut and self.on_cut is not None:
                    self.on_cut()
                if not data or cut:
                    for end in (client, server):
                        _shut(end)
                    return
                try:
                    sink.sendall(data)
                except OSError:
                    return

    def _cut(self, data: bytes, client: socket.socket, upward: bool) -> bool:
        """Note a client that sent the statement; True for the answer to cut."""
        with self._lock:
            if self.dropped:
                return False
            if upward:
                if all(part in data for part in self._statement):
                    self._armed.add(id(client))
                return False
            if id(client) in self._armed and self._answer in data:
                self.dropped += 1
                return True
            return False


def _shut(end: socket.socket) -> None:
    with suppress(OSError):
        end.shutdown(socket.SHUT_RDWR)


def _through(url: str, port: int) -> str:
    """``url`` with its host and port replaced by the proxy's."""
    parts = urlsplit(url)
    netloc = f"{parts.username}@127.0.0.1:{port}" if parts.username else f"127.0.0.1:{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


@contextmanager
def answer_lost(
    pg_url: str, statement: bytes | tuple[bytes, ...], answer: bytes
) -> Iterator[tuple[AnswerDroppingProxy, str]]:
    """A proxy to the test's database that loses the answer to the first
    ``statement`` cairn sends (its commit landed); the store URL through it."""
    parts = urlsplit(pg_url)
    upstream = (parts.hostname or "127.0.0.1", parts.port or 5432)
    with AnswerDroppingProxy(upstream, statement, answer) as proxy:
        yield proxy, _through(pg_url, proxy.port)


def _pay_app(url: str, on_doubt: OnDoubt, calls: list[str]) -> tuple[Cairn, TaskDef[..., str]]:
    """An app whose task charges one order through ``ctx.once``; the charge
    function appends its key to ``calls`` (the outside world's count)."""

    def charge(key: str) -> str:
        calls.append(key)
        return f"charged {key}"

    app = Cairn(url)

    @app.task
    def pay(ctx: Context, order: str) -> str:
        return str(ctx.once(f"pay/{order}", charge, on_doubt=on_doubt))

    return app, pay


@pytest.mark.parametrize("on_doubt", ["raise", "retry"])
def test_a_claim_whose_answer_was_lost_is_still_this_attempts_own(
    pg_url: str, on_doubt: OnDoubt
) -> None:
    """The claim of a key commits and its answer is lost; cairn runs the claim
    again on a new connection and finds the key claimed by this very attempt.
    That claim is its own, made a moment ago, and nothing has been called yet:
    the operation's function is called once and its result recorded, the task
    completes, and the key shows one call. Under the default policy the task
    must not stop with InDoubtOperation, and under on_doubt="retry" the key
    must not count a second call that never happened."""
    calls: list[str] = []
    with answer_lost(pg_url, b"INSERT INTO operations", b"INSERT 0 1") as (proxy, url):
        app, pay = _pay_app(url, on_doubt, calls)
        with app:
            result = app.run(pay, order="o-1")
            op = app.store.get_operation("", "pay/o-1")
    assert proxy.dropped == 1
    assert result == "charged pay/o-1"
    assert calls == ["pay/o-1"]
    assert op is not None
    assert (op.status, op.calls) == ("completed", 1)


def test_a_record_whose_answer_was_lost_is_not_taken_for_someone_elses(pg_url: str) -> None:
    """The record of a completed call commits and its answer is lost; run again,
    it finds the key completed, by itself: the task's history says it made the
    call (not that it adopted another task's result), and no late result (the
    answer of a claimant that had lost its task) is kept for it."""
    calls: list[str] = []
    with answer_lost(pg_url, b"UPDATE operations SET status", b"UPDATE 1") as (proxy, url):
        app, pay = _pay_app(url, "raise", calls)
        with app:
            result = app.run(pay, order="o-1")
            op = app.store.get_operation("", "pay/o-1")
            entries = [
                e for e in app.store.load_history("pay/order=o-1").values() if e.kind == "op"
            ]
    assert proxy.dropped == 1
    assert result == "charged pay/o-1"
    assert calls == ["pay/o-1"]
    assert op is not None
    assert (op.status, op.calls, op.late_result) == ("completed", 1, None)
    assert [entry.attempts for entry in entries] == [1]


def test_a_finish_whose_answer_was_lost_returns_the_result(pg_url: str) -> None:
    """The task's completion commits and its answer is lost; run again, it finds
    the task completed, by itself: app.run returns the result instead of
    raising LeaseLost for a task that completed."""
    calls: list[str] = []
    with answer_lost(pg_url, b"UPDATE tasks SET status", b"UPDATE 1") as (proxy, url):
        app, pay = _pay_app(url, "raise", calls)
        with app:
            result = app.run(pay, order="o-1")
            task = app.store.get_task("pay/order=o-1")
    assert proxy.dropped == 1
    assert result == "charged pay/o-1"
    assert task is not None
    assert task.status == "completed"


# -- the writes below share one database: each test keeps to ids of its own ----------------
@pytest.fixture(scope="module")
def shared_db(pg_template: str) -> Iterator[str]:
    """One migrated database for the tests that share it (each uses task ids,
    batches, keys and limits of its own): making a database per test would cost
    more than the test."""
    admin = postgres_admin_url()
    name = f"cairn_lost_{os.getpid()}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {pg_template}".encode())
    yield with_database(admin, name)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)".encode())


def _waiting_app(url: str) -> tuple[Cairn, TaskDef[..., str]]:
    """An app whose task waits for an 'approval' signal, then returns its note."""
    app = Cairn(url, clock=FakeClock())

    @app.task
    def approve(ctx: Context, n: int) -> str:
        return str(ctx.wait_for("approval").payload["note"])

    return app, approve


def test_a_suspend_whose_answer_was_lost_leaves_the_task_waiting(shared_db: str) -> None:
    """``ctx.wait_for`` suspends the task (it is now waiting, without an owner)
    and the answer is lost; run again, the suspend finds the task waiting
    under this very fence: the task stopped to wait (TaskWaiting), as it did,
    instead of LeaseLost for a task that is correctly waiting."""
    with answer_lost(shared_db, b"SET status = 'waiting'", b"UPDATE 1") as (proxy, url):
        app, approve = _waiting_app(url)
        with app:
            with pytest.raises(TaskWaiting):
                app.run(approve, task_id="suspend-1", n=1)
            task = app.store.get_task("suspend-1")
    assert proxy.dropped == 1
    assert task is not None
    assert (task.status, task.owner) == ("waiting", None)


def test_a_signal_whose_answer_was_lost_says_it_was_sent(shared_db: str) -> None:
    """``cairn signal`` records the signal and wakes the task, and the answer is
    lost; run again, it finds its own signal: it says it sent it (not that the
    task "already had" one), and the task takes that signal's payload."""
    app, approve = _waiting_app(shared_db)
    with app, pytest.raises(TaskWaiting):
        app.run(approve, task_id="signal-1", n=1)
    lost = answer_lost(shared_db, b"INSERT INTO signals", b"COMMIT")
    with lost as (proxy, url), closing(open_store(url)) as store:
        sent = send_signal(store, "signal-1", "approval", {"note": "yes"}, FakeClock().now())
    assert proxy.dropped == 1
    assert (sent.changed, sent.message) == (True, "sent 'approval' to task signal-1")
    with app:
        assert app.run(approve, task_id="signal-1", n=1) == "yes"


def _counting_app(url: str, runs: Counter[str]) -> tuple[Cairn, TaskDef[..., int]]:
    """An app whose task counts its one step's runs in ``runs``."""
    app = Cairn(url, clock=FakeClock())

    def count(n: int) -> int:
        runs[f"step {n}"] += 1
        return n

    @app.task
    def work(ctx: Context, n: int) -> int:
        return int(ctx.step("count", count, n))

    return app, work


def test_a_claim_of_the_next_task_whose_answer_was_lost_takes_no_second_task(
    shared_db: str,
) -> None:
    """``run_batch`` claims the batch's first pending task and the answer is
    lost; run again, the claim finds the task it took (this owner's, claimed at
    this very stamp) and runs it, instead of claiming the next one and leaving
    the first running under this process until it is taken back as
    "interrupted". Every task runs its step once, none counts an interruption."""
    runs: Counter[str] = Counter()
    claim_next = (
        b"AND status = 'pending' ORDER BY priority DESC, pos LIMIT 1 FOR UPDATE SKIP LOCKED"
    )
    with answer_lost(shared_db, claim_next, b"UPDATE 1") as (proxy, url):
        app, work = _counting_app(url, runs)
        with app:
            report = app.run_batch("claim-next", work, [{"n": 1}, {"n": 2}], concurrency=1)
            tasks = [app.store.get_task(f"claim-next/n={n}") for n in (1, 2)]
    assert proxy.dropped == 1
    assert report.ok
    assert runs == Counter({"step 1": 1, "step 2": 1})
    assert [(t.status, t.interruptions) for t in tasks if t] == [("completed", 0)] * 2


def test_a_claim_of_one_task_whose_answer_was_lost_runs_it(shared_db: str) -> None:
    """``app.run`` claims its task by id and the answer is lost; run again, the
    claim finds the task at the next fence under this owner and stamp: app.run
    runs it, instead of raising TaskBusy ("claimed by another process just
    now") and leaving it running here until an interruption is counted."""
    runs: Counter[str] = Counter()
    claim_one = b"AND (status = 'pending' OR (status = 'running'"
    with answer_lost(shared_db, claim_one, b"UPDATE 1") as (proxy, url):
        app, work = _counting_app(url, runs)
        with app:
            result = app.run(work, task_id="claim-one", n=3)
            task = app.store.get_task("claim-one")
    assert proxy.dropped == 1
    assert result == 3
    assert runs == Counter({"step 3": 1})
    assert task is not None
    assert (task.status, task.interruptions, task.fence) == ("completed", 0, 1)


def _crash_after_claim(url: str, order: str) -> None:
    """Run ``pay`` for ``order`` until its key is claimed, then crash: the key is
    left claimed by an attempt that will never record (in doubt)."""
    crashed, pay = _pay_app(url, "raise", [])
    FaultPlan([Fault("after_claim")]).install(crashed)
    with crashed, pytest.raises(InjectedCrash):
        crashed.run(pay, order=order)


def _pay_losing_the_reclaim(url: str, on_doubt: OnDoubt, order: str) -> list[str]:
    """Run ``pay`` for ``order`` with the answer to its reclaim of the key lost:
    it completes, its key completed after 2 calls. The calls the function saw."""
    calls: list[str] = []
    reclaim = b"SET status = 'claimed', calls = calls + 1"
    with answer_lost(url, reclaim, b"UPDATE 1") as (proxy, through):
        app, pay = _pay_app(through, on_doubt, calls)
        with app:
            assert app.run(pay, order=order) == f"charged pay/{order}"
            op = app.store.get_operation("", f"pay/{order}")
    assert proxy.dropped == 1
    assert op is not None
    assert (op.status, op.calls) == ("completed", 2)
    return calls


def test_a_reclaim_whose_answer_was_lost_counts_one_call_more(shared_db: str) -> None:
    """Under on_doubt="retry" the key in doubt is claimed again (its call count
    goes from 1 to 2) and the answer is lost; run again, the reclaim finds the
    key claimed by this very attempt at 2: the function is called once, and
    the key says 2 calls, not 3 (the attempt's own claim taken for a dead
    claimant's and claimed once more)."""
    _crash_after_claim(shared_db, "r-1")
    assert _pay_losing_the_reclaim(shared_db, "retry", "r-1") == ["pay/r-1"]


def test_a_reclaim_after_resolve_whose_answer_was_lost_does_not_put_the_key_in_doubt(
    shared_db: str,
) -> None:
    """Under the default policy an operator settles the key in doubt with
    ``cairn ops resolve --retry``; the next run claims it again and the answer
    is lost. Run again, the reclaim finds its own claim: the function is called
    once and the task completes, instead of stopping with InDoubtOperation on a
    key the operator had just released."""
    _crash_after_claim(shared_db, "r-2")
    app, pay = _pay_app(shared_db, "raise", [])
    with app, pytest.raises(TaskFailed, match="in doubt"):
        app.run(pay, order="r-2")
    with closing(open_store(shared_db)) as store:
        resolved = resolve(
            store, "", "pay/r-2", "released", permanent=False, now=app.clock.now(), confirmed=True
        )
    assert resolved.changed, resolved.message
    assert _pay_losing_the_reclaim(shared_db, "raise", "r-2") == ["pay/r-2"]


def test_a_permit_whose_answer_was_lost_is_taken_once(shared_db: str) -> None:
    """A step under a shared limit (one call an hour) takes its permit and the
    answer to the commit is lost; run again, the acquire finds its own permit
    (``HAS_PERMIT``: its id is the caller's) and takes no second one: the step
    runs, and the limit holds exactly one permit, which a second call would
    have to wait an hour for."""
    runs: Counter[str] = Counter()

    def counted(n: int) -> int:
        runs["call"] += 1
        return n

    with answer_lost(shared_db, b"INSERT INTO permits", b"COMMIT") as (proxy, url):
        app = Cairn(url, clock=FakeClock(), limits={"lost-hourly": Rate(1, per=3600)})

        @app.task
        def call(ctx: Context, n: int) -> int:
            return int(ctx.step("call", counted, n, limit="lost-hourly"))

        with app:
            assert app.run(call, task_id="permit-1", n=1) == 1
    assert proxy.dropped == 1
    assert runs == Counter({"call": 1})
    with psycopg.connect(shared_db) as conn:
        rows = conn.execute(
            "SELECT task_id, held FROM cairn.permits WHERE limit_name = 'lost-hourly'"
        ).fetchall()
    assert rows == [("permit-1", 0)]


def test_a_rerun_whose_answer_was_lost_keeps_the_task(shared_db: str) -> None:
    """Under on_change='rerun' a resumed task whose step changed marks it (and
    every later step) to run again, and the answer is lost; run again, the
    marking finds the changed step already marked under this fence: the task
    goes on and runs the new code once, instead of raising LeaseLost (the
    statement, finding nothing left to mark, changed no row)."""
    runs: Counter[str] = Counter()

    def old_analyze() -> str:
        runs["old"] += 1
        return "old"

    def new_analyze() -> str:
        runs["new"] += 1
        return "new"

    def deploy(url: str, analyze: Callable[[], str], **options: Any) -> tuple[Cairn, Any]:
        app = Cairn(url, clock=FakeClock(), **options)

        @app.task(name="reviewed")
        def reviewed(ctx: Context, n: int) -> str:
            verdict = ctx.step("analyze", analyze)
            return str(ctx.step("apply", lambda: f"applied {verdict}"))

        return app, reviewed

    first, reviewed = deploy(shared_db, old_analyze)
    FaultPlan([Fault("before_step", step="apply")]).install(first)
    with first, pytest.raises(InjectedCrash):
        first.run(reviewed, task_id="rerun-1", n=1)
    with answer_lost(shared_db, b"UPDATE steps SET status = 'retrying'", b"UPDATE") as (proxy, url):
        second, reviewed = deploy(url, new_analyze, on_change="rerun")
        with second:
            result = second.run(reviewed, task_id="rerun-1", n=1)
    assert proxy.dropped == 1
    assert result == "applied new"
    assert runs == Counter({"old": 1, "new": 1})


def _claimed_elsewhere(store: Store, task_id: str) -> TaskRecord:
    """``task_id``, new, claimed by a process that is not this one."""
    now = FakeClock().now()
    store.create_task(NewTask(task_id, "work", "{}", "json"), now)
    claimed = store.claim_task(task_id, 0, "elsewhere/1/1/abcd", now + timedelta(hours=1), now)
    assert claimed is not None
    return claimed


def test_a_hand_back_whose_answer_was_lost_says_it_handed_the_task_back(shared_db: str) -> None:
    """A worker stopped twice hands its running task back (pending, the fence
    moved) and the answer is lost; run again, the release finds the task
    handed back at the next fence at its own stamp: it answers True, so the
    worker reports the task handed back."""
    with closing(open_store(shared_db)) as store:
        claimed = _claimed_elsewhere(store, "release-1")
    lost = answer_lost(shared_db, b"SET status = 'pending', owner = NULL", b"UPDATE 1")
    with lost as (proxy, url), closing(open_store(url)) as store:
        handed_back = store.release_task("release-1", claimed.fence, FakeClock().now())
        task = store.get_task("release-1")
    assert proxy.dropped == 1
    assert handed_back
    assert task is not None
    assert (task.status, task.fence) == ("pending", claimed.fence + 1)


def test_an_enqueue_whose_answer_was_lost_counts_its_tasks(shared_db: str) -> None:
    """``cairn enqueue`` of two new tasks commits and the answer is lost; run
    again, it finds the tasks it created (created at its very stamp) and says
    2 were enqueued, not 0."""
    tasks = [NewTask(f"enqueue-1/{n}", "work", "{}", "json", "enqueue-1", str(n)) for n in (1, 2)]
    lost = answer_lost(shared_db, b"INSERT INTO tasks", b"COMMIT")
    with lost as (proxy, url), closing(open_store(url)) as store:
        enqueued = store.enqueue(tasks, FakeClock().now())
        again = store.enqueue(tasks, FakeClock().now())
    assert proxy.dropped == 1
    assert (enqueued, again) == (2, 0)


def _failed(store: Store, task_id: str) -> None:
    """``task_id``, new, claimed elsewhere and failed there."""
    claimed = _claimed_elsewhere(store, task_id)
    now = FakeClock().now()
    assert store.finish_task(task_id, claimed.fence, "failed", None, '{"type": "E"}', now)


@pytest.mark.parametrize(
    ("action", "statement", "said"),
    [
        (CANCEL, b"SET status = 'cancelled'", "pending -> cancelled"),
        (RETRY, b"retry_base = attempts", "failed -> pending"),
    ],
)
def test_a_cancel_or_retry_whose_answer_was_lost_says_it_changed_the_task(
    shared_db: str, action: Action, statement: bytes, said: str
) -> None:
    """``cairn cancel T`` (or ``cairn retry T``) changes the task and the answer
    is lost; run again, the change finds the task as it left it, at its own
    stamp: the command says what it did, instead of "changed status just now;
    nothing changed"."""
    task_id = f"{action.name}-1"
    with closing(open_store(shared_db)) as store:
        if action is RETRY:
            _failed(store, task_id)
        else:
            store.create_task(NewTask(task_id, "work", "{}", "json"), FakeClock().now())
    lost = answer_lost(shared_db, statement, b"UPDATE 1")
    with lost as (proxy, url), closing(open_store(url)) as store:
        applied = apply_to_task(admin(store), action, task_id, FakeClock().now())
    assert proxy.dropped == 1
    assert (applied.changed, applied.message) == (True, f"task {task_id}: {said}")


def test_a_batch_cancel_whose_answer_was_lost_counts_each_task_once(shared_db: str) -> None:
    """``cairn cancel --batch`` changes the batch's tasks one status at a time;
    the answer to the second statement (its running tasks) is lost. Run
    again, it finds the tasks cancelled at its stamp (the pending one too,
    cancelled by the first statement, which the command does not count
    twice): "2 task(s) -> cancelled (1 pending, 1 running)", not 1."""
    with closing(open_store(shared_db)) as store:
        tasks = [NewTask(f"cb/{n}", "work", "{}", "json", "cb", str(n)) for n in (1, 2)]
        store.enqueue(tasks, FakeClock().now())
        now = FakeClock().now()
        assert store.claim_task("cb/2", 0, "elsewhere/1/1/abcd", now + timedelta(hours=1), now)
    running = b"\x00\x00\x00\x07running"  # the status parameter, as it is sent
    with answer_lost(shared_db, (b"RETURNING id, pos", running), b"UPDATE 1") as (proxy, url):
        result = CliRunner().invoke(cli, ["cancel", "--batch", "cb", "--store", url])
    assert proxy.dropped == 1
    assert result.exit_code == 0, result.output
    assert "batch cb: 2 task(s) -> cancelled (1 pending, 1 running)" in result.output


def test_a_resolve_whose_answer_was_lost_settles_the_key_and_retries_the_task(
    shared_db: str,
) -> None:
    """``cairn ops resolve KEY --result ...`` completes a key in doubt and the
    answer is lost; run again, it finds the key completed at its own stamp:
    it says so and moves the failed task back to pending, instead of "changed
    just now; nothing changed" with the task left failed."""
    _crash_after_claim(shared_db, "r-3")
    app, pay = _pay_app(shared_db, "raise", [])
    with app, pytest.raises(TaskFailed, match="in doubt"):
        app.run(pay, order="r-3")
    lost = answer_lost(shared_db, b"result = $2, checksum = $3", b"UPDATE 1")
    with lost as (proxy, url), closing(open_store(url)) as store:
        now = FakeClock().now()
        resolved = resolve(
            store, "", "pay/r-3", "completed", result="paid", permanent=False, now=now
        )
        task = store.get_task("pay/order=r-3")
    assert proxy.dropped == 1
    assert resolved.changed, resolved.message
    assert task is not None
    assert task.status == "pending"


def test_a_schedule_tick_whose_answer_was_lost_owns_its_firings(shared_db: str) -> None:
    """A worker's tick moves a schedule on and creates its firing in one
    transaction, and the answer is lost; run again, it finds the schedule
    moved where it moved it, at its stamp: it answers True (the firing is its
    own: logged, idle threads woken), not False as if another worker had
    moved first."""
    start = FakeClock().now()
    row = ScheduleRecord("lost-nightly", "work", "0 3 * * *", "UTC", start, None, start, start)
    fired_at = start + timedelta(hours=3)
    moved = replace(row, covered_until=fired_at, last_fired_at=fired_at)
    firing = NewTask("lost-nightly/1", "work", "{}", "json", "lost-nightly", "1")
    with closing(open_store(shared_db)) as store:
        assert store.add_schedule(row)
    lost = answer_lost(shared_db, b"UPDATE schedules", b"COMMIT")
    with lost as (proxy, url), closing(open_store(url)) as store:
        advanced = store.advance_schedule(start, moved, [firing], fired_at)
        schedule = store.get_schedule("lost-nightly")
    assert proxy.dropped == 1
    assert advanced
    assert schedule is not None
    assert schedule.covered_until == fired_at


def test_an_import_whose_answer_was_lost_is_not_refused(shared_db: str, tmp_path: Path) -> None:
    """``cairn import`` writes a batch in one transaction and the answer is
    lost; run again, it finds the batch's first row as the file gives it: the
    import returns, instead of failing on its own rows as duplicates (after
    which importing again would say the store "already has" the batch)."""
    source = Cairn(f"sqlite:///{tmp_path / 'source.db'}", clock=FakeClock())

    @source.task
    def double(ctx: Context, n: int) -> int:
        return int(ctx.step("double", lambda: n * 2))

    out = io.StringIO()
    with source:
        assert source.run_batch("moved", double, [{"n": 1}, {"n": 2}], progress=False).ok
        export_batch(source.store, None, "moved", out)
    lost = answer_lost(shared_db, b"INSERT INTO batches", b"COMMIT")
    with lost as (proxy, url), closing(open_store(url)) as store:
        import_batch(store, None, out.getvalue().splitlines())
        moved = [store.get_task(f"moved/n={n}") for n in (1, 2)]
    assert proxy.dropped == 1
    assert [(t.status, t.result) for t in moved if t] == [("completed", "2"), ("completed", "4")]


def test_an_import_whose_connection_is_lost_part_way_reads_its_file_again(
    shared_db: str, tmp_path: Path
) -> None:
    """An import inserts its rows as it reads them from the file, in one
    transaction, and the connection is lost after the tasks were sent: nothing
    was committed, so the store runs the transaction again on a new
    connection, reading the file again from its start. Every row lands, once."""
    source = Cairn(f"sqlite:///{tmp_path / 'source.db'}", clock=FakeClock())

    @source.task
    def triple(ctx: Context, n: int) -> int:
        return int(ctx.step("triple", lambda: n * 3))

    export = tmp_path / "again.cairn"
    items = (1, 2, 3)
    with source, export.open("w", encoding="utf-8") as out:
        assert source.run_batch("again", triple, [{"n": n} for n in items], progress=False).ok
        export_batch(source.store, None, "again", out)
    lost = answer_lost(shared_db, b"INSERT INTO tasks", b"INSERT 0 1")
    with lost as (proxy, url), closing(open_store(url)) as store:
        with export.open(encoding="utf-8") as lines:
            import_batch(store, None, lines, str(export))
        moved = [store.get_task(f"again/n={n}") for n in items]
        steps = [len(store.load_history(f"again/n={n}")) for n in items]
    assert proxy.dropped == 1
    assert [(t.status, t.result) for t in moved if t] == [("completed", str(3 * n)) for n in items]
    assert steps == [1, 1, 1]


class _Unseekable(io.StringIO):
    """An output that cannot go back, as a pipe cannot."""

    def seekable(self) -> bool:
        return False


def _lost_mid_export(shared_db: str, batch: str, out: io.StringIO) -> AnswerDroppingProxy:
    """Export ``batch`` (one task) to ``out`` through a connection that is lost
    once the batch's row and its tasks are written, before its steps are read."""
    task = NewTask(f"{batch}/n=1", "work", "{}", "json", batch, "n=1")
    with closing(open_store(shared_db)) as store:
        store.enqueue([task], FakeClock().now())
    with (
        answer_lost(shared_db, b"FROM steps", b"DECLARE CURSOR") as (proxy, url),
        closing(open_store(url)) as store,
    ):
        export_batch(store, None, batch, out)
    return proxy


def test_an_export_whose_connection_is_lost_part_way_starts_the_file_again(
    shared_db: str,
) -> None:
    """An export reads a batch table by table in one snapshot, writing each row
    as it comes, and the connection is lost once the batch's row and its tasks
    are written. The rest cannot be read from that snapshot: the export goes
    back to the start of the file and writes the batch again from a new one.
    The file is whole, each row once, as an export without the loss writes it."""
    out = io.StringIO()
    proxy = _lost_mid_export(shared_db, "rewound", out)
    clean = io.StringIO()
    with closing(open_store(shared_db)) as store:
        export_batch(store, None, "rewound", clean)
    assert proxy.dropped == 1
    assert out.getvalue().splitlines()[1:] == clean.getvalue().splitlines()[1:]  # bar its time


def test_an_export_whose_connection_is_lost_part_way_into_a_pipe_stops(shared_db: str) -> None:
    """The same loss, with an output that cannot go back (a pipe): the rows
    written so far cannot be taken back, and reading the batch again would
    write them twice, from another moment. The export stops with
    StoreUnavailable, saying to export again; what it wrote has no trailer, so
    no import takes it."""
    out = _Unseekable()
    with pytest.raises(StoreUnavailable, match="export it again"):
        _lost_mid_export(shared_db, "piped", out)
    written = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [item.get("table") for item in written] == [None, "batches", "tasks"]


def test_a_reclaim_run_again_after_its_task_was_taken_gets_nothing(shared_db: str) -> None:
    """The reclaim of a key in doubt commits and its answer is lost; before it
    is run again, another process takes the task over (the fence moves). Run
    again, it must not know the claim as its own: its look checks the fence as
    the write does. The attempt stops with LeaseLost and never calls the
    operation: recognising a first try never makes a write succeed for a
    process that lost its task."""
    _crash_after_claim(shared_db, "r-4")
    calls: list[str] = []

    def take_the_task_over() -> None:
        with closing(open_store(shared_db)) as store:
            task = store.get_task("pay/order=r-4")
            assert task is not None
            now = FakeClock().now()
            later = now + timedelta(hours=1)
            taken = store.claim_task(task.id, task.fence, "elsewhere/1/1/abcd", later, now,
                                     owner_gone=True)  # fmt: skip
            assert taken is not None

    reclaim = b"SET status = 'claimed', calls = calls + 1"
    with answer_lost(shared_db, reclaim, b"UPDATE 1") as (proxy, url):
        proxy.on_cut = take_the_task_over
        app, pay = _pay_app(url, "retry", calls)
        with app, pytest.raises(LeaseLost):
            app.run(pay, order="r-4")
    assert proxy.dropped == 1
    assert calls == []


def test_a_fork_whose_answer_was_lost_says_it_forked_once(shared_db: str) -> None:
    """``cairn rerun`` forks a finished task in one transaction and the answer
    to its COMMIT is lost; run again, the fork finds its own superseded run at
    its stamp: it says it forked the task, and the task is at run 2 with one
    superseded run and its entries kept once (not "changed just now")."""
    with closing(open_store(shared_db)) as store:
        claimed = _claimed_elsewhere(store, "fork-1")
        now = FakeClock().now()
        step = _entry("fork-1", 1, now)
        assert store.record_step(step, claimed.fence, first=True)
        assert store.finish_task("fork-1", claimed.fence, "completed", "1", None, now)
    lost = answer_lost(shared_db, b"INSERT INTO superseded_entries", b"COMMIT")
    with lost as (proxy, url), closing(open_store(url)) as store:
        forked = admin(store).fork_task("fork-1", 1, 1, FakeClock().now(), "cli:test")
    assert proxy.dropped == 1
    assert forked
    with closing(open_store(shared_db)) as store:
        tools = admin(store)
        task = tools.get_task("fork-1")
        assert task is not None
        assert (task.run, task.status) == (2, "pending")
        assert [r.run for r in tools.task_runs("fork-1")] == [1]
        assert [(run, e.seq) for run, e in tools.superseded_entries("fork-1")] == [(1, 1)]
        assert tools.load_history("fork-1") == {}


def test_a_cascade_whose_answer_was_lost_names_the_children_it_cancelled(shared_db: str) -> None:
    """``cairn cancel PARENT`` cancels the parent and its child in one
    transaction and the answer to its COMMIT is lost; run again, it finds both
    cancelled at its stamp and names them, instead of "changed status just now"."""
    with closing(open_store(shared_db)) as store:
        tasks = [
            NewTask("cas-p", "work", "{}", "json"),
            NewTask("cas-p/c", "work", "{}", "json", parent_id="cas-p"),
        ]
        store.enqueue(tasks, FakeClock().now())
    lost = answer_lost(shared_db, b"parent_id IN", b"COMMIT")
    with lost as (proxy, url), closing(open_store(url)) as store:
        applied = apply_to_task(admin(store), CANCEL, "cas-p", FakeClock().now())
    assert proxy.dropped == 1
    assert (applied.changed, applied.children) == (True, ["cas-p/c"])


def test_an_audit_entry_whose_answer_was_lost_is_written_once(shared_db: str) -> None:
    """An operator action's audit entry is inserted and the answer (its id) is
    lost; run again, the insert finds its own entry: one entry, completed
    with the action's count."""
    with closing(open_store(shared_db)) as store:
        store.create_task(NewTask("audit-1", "work", "{}", "json"), FakeClock().now())
    lost = answer_lost(shared_db, (b"INSERT INTO audit", b"audit-1"), b"INSERT 0 1")
    with lost as (proxy, url), closing(open_store(url)) as store:
        apply_to_task(admin(store), CANCEL, "audit-1", FakeClock().now())
    assert proxy.dropped == 1
    with closing(open_store(shared_db)) as store:
        entries = [e for e in admin(store).audit_page(None, 1000) if e.target == "task audit-1"]
    assert [(e.action, e.count) for e in entries] == [("cancel", 1)]


def test_a_child_whose_insert_answer_was_lost_is_made_once(shared_db: str) -> None:
    """A spawn's insert of a child under its parent's fence commits and the
    answer is lost; run again, the insert finds the child it made: made (not
    "the parent's fence moved"), once."""
    with closing(open_store(shared_db)) as store:
        parent = _claimed_elsewhere(store, "kid-p")
    child = NewTask("kid-p/c", "work", "{}", "json", parent_id="kid-p", parent_fence=parent.fence)
    lost = answer_lost(shared_db, (b"INSERT INTO tasks", b"FOR SHARE"), b"INSERT 0 1")
    with lost as (proxy, url), closing(open_store(url)) as store:
        made = store.create_task(child, FakeClock().now())
    assert proxy.dropped == 1
    assert made
    with closing(open_store(shared_db)) as store:
        assert [t.id for t in admin(store).list_tasks() if t.parent_id == "kid-p"] == ["kid-p/c"]


def _entry(task_id: str, seq: int, now: datetime) -> StepRecord:
    return StepRecord(task_id, seq, "step", "s", "completed", "1", 1, 1, 1, None, None, now, now)
