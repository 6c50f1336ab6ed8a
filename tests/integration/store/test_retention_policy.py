"""Retention that runs itself (``cairn.retention``), on both stores.

A policy deletes exactly the finished tasks it names (by status and age, in
batches whose name matches), with every row of theirs, and nothing else: not
newer tasks, not other statuses, not batches it does not match, never a batch
with a task pending; one worker at a time takes a run's turn, and a run goes a
small chunk per tick.
"""

from __future__ import annotations

import http.client
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cairn import Cairn, Context
from cairn.cli import app as cli
from cairn.clock import FakeClock
from cairn.errors import ConfigurationError
from cairn.retention import (
    NEXT_RUN_NOTE,
    Housekeeper,
    Retention,
    noted_policies,
    planned,
    run_chunks,
)
from cairn.store.admin import admin
from cairn.task import TaskDef
from cairn.ui.server import DashboardServer, UIConfig, serve_in_thread
from cairn.worker import Worker

DAY = 86400.0


def _app(url: str, clock: FakeClock, **options: object) -> tuple[Cairn, TaskDef[..., int]]:
    app = Cairn(url, clock=clock, **options)  # type: ignore[arg-type]

    @app.task
    def work(ctx: Context, n: int) -> int:
        ctx.once(f"effect-{ctx.task_id}", lambda _op: n)
        conv = ctx.conversation("notes")
        conv.append({"role": "user", "content": f"item {n}"})
        value = ctx.step("double", lambda: n * 2)
        if n < 0:
            raise ValueError("a negative item")
        return value

    return app, work


def _ran(app: Cairn, work: TaskDef[..., int], batch: str, items: list[int]) -> None:
    app.run_batch(batch, work, [{"n": n} for n in items])


def _counts(app: Cairn) -> dict[str, int]:
    """Rows left in each table a task owns (the store's own SQL, read through it)."""
    store = admin(app.store)
    found = {}
    for table in ("tasks", "steps", "operations", "conversations", "messages", "batches"):
        found[table] = int(store._exec(f"SELECT COUNT(*) FROM {table}").rows[0][0])  # type: ignore[attr-defined]
    return found


def _statuses(app: Cairn, batch: str) -> dict[str, int]:
    return {c.status: c.tasks for c in admin(app.store).batch_statuses(batch)}


@pytest.fixture
def aged(store_url: str) -> tuple[Cairn, TaskDef[..., int], FakeClock]:
    """Batches finished at known ages: nightly-old 40 days ago (3 completed, 2
    failed), nightly-new 10 days ago (2 completed), other 40 days ago (2
    completed, no pattern of the policy names it); now is day 40."""
    # Day 40 is about now, so `cairn prune --policy` (the real clock) sees the same ages.
    clock = FakeClock(datetime.now(UTC) - timedelta(days=40, minutes=5))
    app, work = _app(store_url, clock, task_retry=_no_retry())
    with app:
        _ran(app, work, "nightly-old", [1, 2, 3, -1, -2])
        _ran(app, work, "other", [4, 5])
        clock.advance(30 * DAY)
        _ran(app, work, "nightly-new", [6, 7])
        clock.advance(10 * DAY)
    return app, work, clock


def _no_retry() -> object:
    from cairn.retry import Retry

    return Retry(attempts=1)


POLICY = Retention(batches="nightly-*", completed="30d", failed="90d")


def test_a_run_deletes_what_the_policy_names_and_nothing_else(
    aged: tuple[Cairn, TaskDef[..., int], FakeClock],
) -> None:
    """completed=30d, failed=90d on nightly-*: the 3 completed tasks of
    nightly-old (40 days) go with their steps, operations, conversations and
    messages; its failed ones (younger than 90 days), nightly-new (10 days)
    and the batch `other` (no pattern) stay, row for row."""
    app, _, clock = aged
    with app:
        before = _counts(app)
        store = admin(app.store)
        plan = planned(store, [POLICY], clock.now())
        assert [(e.batch, e.status, e.count) for e in plan] == [("nightly-old", "completed", 3)]
        deleted = sum(run_chunks(store, [POLICY], clock.now(), chunk=2))
        after = _counts(app)
        assert deleted == 3
        assert _statuses(app, "nightly-old") == {"failed": 2}
        assert _statuses(app, "nightly-new") == {"completed": 2}
        assert _statuses(app, "other") == {"completed": 2}
    assert after["tasks"] == before["tasks"] - 3
    assert after["operations"] == before["operations"] - 3
    assert after["conversations"] == before["conversations"] - 3
    assert after["messages"] == before["messages"] - 3
    assert after["steps"] < before["steps"]
    assert after["batches"] == before["batches"]


def test_a_batch_goes_with_its_last_task(
    aged: tuple[Cairn, TaskDef[..., int], FakeClock],
) -> None:
    """When every task of a batch is past its age, the batch's row goes too."""
    app, _, clock = aged
    with app:
        store = admin(app.store)
        everything = Retention(completed="1d", failed="1d")
        sum(run_chunks(store, [everything], clock.now()))
        assert store.batch_names() == []
        assert _counts(app)["tasks"] == 0


def test_a_batch_with_a_pending_task_is_not_touched(
    aged: tuple[Cairn, TaskDef[..., int], FakeClock],
) -> None:
    """A task enqueued into an old batch keeps the whole batch, even after the
    run looked at it (the chunk's own statement checks)."""
    app, work, clock = aged
    with app:
        store = admin(app.store)
        app.enqueue("nightly-old", work, [{"n": 9}])
        assert planned(store, [POLICY], clock.now()) == []
        old = clock.now() - timedelta(days=30)
        assert store.expire_tasks("nightly-old", "completed", old, 100) == 0
        assert _statuses(app, "nightly-old") == {"completed": 3, "failed": 2, "pending": 1}


def test_one_worker_takes_each_turn(aged: tuple[Cairn, TaskDef[..., int], FakeClock]) -> None:
    """Two housekeepers on one store: the first takes the due run and the
    second does not; an hour later the next turn is open again, to one."""
    app, _, clock = aged
    with app:
        store = admin(app.store)
        first = Housekeeper(store, [POLICY], clock, chunk=1)
        second = Housekeeper(store, [POLICY], clock, chunk=1)
        first.tick()
        second.tick()
        assert first._run is not None
        assert second._run is None
        for _ in range(10):
            first.tick()
            second.tick()
        assert first.deleted == 3
        assert second.deleted == 0
        clock.advance(3600)
        second.tick()
        assert second._run is not None
        assert store.meta_value(NEXT_RUN_NOTE) is not None


def test_a_run_goes_one_chunk_per_tick(aged: tuple[Cairn, TaskDef[..., int], FakeClock]) -> None:
    """chunk=1: each tick after the turn is taken deletes at most one task, so
    the three old tasks take three ticks (and one more finds none left)."""
    app, _, clock = aged
    with app:
        store = admin(app.store)
        keeper = Housekeeper(store, [POLICY], clock, chunk=1)
        keeper.tick()  # takes the turn
        seen = []
        for _ in range(4):
            keeper.tick()
            seen.append(keeper.deleted)
        assert seen == [1, 2, 3, 3]


def test_a_worker_notes_its_policy_and_the_cli_shows_it(
    aged: tuple[Cairn, TaskDef[..., int], FakeClock], store_url: str
) -> None:
    """The policy a worker notes is what `cairn prune --policy --dry-run`
    shows, with what it would delete; without --dry-run it deletes that."""
    app, _, clock = aged
    with app:
        Housekeeper(admin(app.store), [POLICY], clock).start()
        assert noted_policies(admin(app.store)) == (POLICY,)
    shown = CliRunner().invoke(cli, ["prune", "--policy", "--dry-run", "--store", store_url])
    assert shown.exit_code == 0, shown.output
    assert "batches nightly-*: completed 30d, failed 90d, cancelled kept" in shown.output
    assert "next run:" in shown.output
    assert "would delete 3 completed task(s) of batch nightly-old" in shown.output
    done = CliRunner().invoke(cli, ["prune", "--policy", "--store", store_url])
    assert done.exit_code == 0, done.output
    assert "deleted 3 task(s)" in done.output


def test_prune_policy_without_a_noted_policy_says_how(store_url: str) -> None:
    """No worker noted a policy: one line saying how to give one, exit 2."""
    with Cairn(store_url) as app:
        app.store  # noqa: B018 - creates the store
    result = CliRunner().invoke(cli, ["prune", "--policy", "--store", store_url])
    assert result.exit_code == 2
    assert "has no retention policy noted" in result.output


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"completed": "soon"}, "is not an age"),
        ({"failed": "0d"}, "longer than zero"),
        ({"batches": ""}, "batch-name pattern"),
    ],
)
def test_a_bad_policy_is_refused_clearly(options: dict[str, str], said: str) -> None:
    """An age that is not one, a zero age or an empty pattern: ConfigurationError."""
    with pytest.raises(ConfigurationError, match=said):
        Retention(**options)


def test_retention_takes_only_policies(tmp_path: Path) -> None:
    """Cairn(retention=...) refuses anything but Retention policies."""
    with pytest.raises(ConfigurationError, match="Retention"):
        Cairn(f"sqlite:///{tmp_path / 'c.db'}", retention=["30d"])  # type: ignore[list-item]


def test_a_running_worker_applies_the_apps_policy(store_url: str) -> None:
    """A worker of an app with ``retention=`` notes the policy and, on its own,
    deletes the old completed tasks while it waits for work; the young ones
    stay."""
    clock = FakeClock(datetime.now(UTC) - timedelta(days=40))
    app, work = _app(store_url, clock, retention=POLICY)
    with app:
        _ran(app, work, "nightly-old", [1, 2])
        clock.advance(35 * DAY)
        _ran(app, work, "nightly-new", [3])
        clock.advance(5 * DAY)
        worker = Worker(app, concurrency=1, idle_wait=0.05)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 60
        while admin(app.store).batch_names() != ["nightly-new"] and time.monotonic() < deadline:
            time.sleep(0.05)  # real-sleep-ok: a poll for the worker's run, bounded by the deadline
        worker.stop()
        thread.join(30)
        assert admin(app.store).batch_names() == ["nightly-new"]
        assert noted_policies(admin(app.store)) == (POLICY,)
        assert _statuses(app, "nightly-new") == {"completed": 1}


def test_the_dashboard_shows_the_policy_and_the_next_run(
    aged: tuple[Cairn, TaskDef[..., int], FakeClock],
) -> None:
    """The batch list (served by the real server) says the noted policy and
    when the next run is due, once a worker has taken a turn."""
    app, _, clock = aged
    with app:
        keeper = Housekeeper(admin(app.store), [POLICY], clock)
        keeper.start()
        keeper.tick()
        server = DashboardServer(("127.0.0.1", 0), UIConfig(admin(app.store), clock.now))
        thread = serve_in_thread(server)
        try:
            port = int(server.server_address[1])
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/", headers={"Host": f"127.0.0.1:{port}"})
            body = conn.getresponse().read().decode()
            conn.close()
        finally:
            server.shutdown()
            server.server_close()
            thread.join()
    due = (clock.now() + timedelta(hours=1)).isoformat(timespec="seconds")
    assert "batches nightly-*: completed 30d, failed 90d, cancelled kept" in body
    assert f"next run: {due}" in body
