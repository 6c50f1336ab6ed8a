"""``ctx.wait_for`` and signals: a task waits for a person without holding a process.

Every test runs on SQLite and on PostgreSQL (``store_url``).
"""

from __future__ import annotations

import io
import json
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cairn import Cairn, Context, TaskDef, TaskError, TaskWaiting, UnknownTask
from cairn.cli import app as cli
from cairn.clock import FakeClock
from cairn.portable import export_batch, import_batch
from cairn.store import admin
from cairn.testing import set_fault_hook
from tests.crashes import LEASE, Crash, second_process
from tests.crashes import url as url  # a fixture: pytest finds it by this name


def approval_app(
    url: str, clock: FakeClock, effects: Counter[str]
) -> tuple[Cairn, TaskDef[..., Any]]:
    app = Cairn(url, clock=clock)

    def propose(app_id: str) -> str:
        effects.update(["propose"])
        return f"raise {app_id}"

    @app.task
    def change(ctx: Context, app_id: str) -> dict[str, Any]:
        proposal = ctx.step("propose", propose, app_id)
        decision = ctx.wait_for("approval", timeout=timedelta(hours=8))
        if decision.timed_out:
            return {"applied": False, "why": "no answer in 8 hours"}
        if decision.payload.get("ok"):
            ctx.step("apply", lambda: effects.update(["apply"]))
        return {"applied": bool(decision.payload.get("ok")), "proposal": proposal}

    return app, change


def test_a_waiting_task_holds_no_process_and_a_signal_resumes_it(
    url: str, clock: FakeClock
) -> None:
    """The task stops at the wait (TaskWaiting names the command to send), its row
    says waiting with no owner; after the signal, running it again replays the
    proposal (not run again), takes the payload and applies once."""
    effects: Counter[str] = Counter()
    app, change = approval_app(url, clock, effects)
    with app:
        with pytest.raises(TaskWaiting, match="cairn signal c approval") as waiting:
            app.run(change, task_id="c", app_id="a1")
        assert waiting.value.waiting_for == "approval"
        row = app.store.get_task("c")
        assert row is not None
        assert (row.status, row.owner, row.lease_expires_at) == ("waiting", None, None)
        assert row.wake_at == clock.now() + timedelta(hours=8)
        # Running it again before any answer changes nothing.
        with pytest.raises(TaskWaiting):
            app.run(change, task_id="c", app_id="a1")
        assert app.signal("c", "approval", {"ok": True, "by": "mika"})
        assert app.store.get_task("c").status == "pending"  # type: ignore[union-attr]
        result = app.run(change, task_id="c", app_id="a1")
    assert result == {"applied": True, "proposal": "raise a1"}
    assert effects == Counter({"propose": 1, "apply": 1})


def test_a_signal_sent_before_the_wait_is_taken_without_suspending(
    url: str, clock: FakeClock
) -> None:
    """A signal that arrives while the task is still pending is there when the
    task reaches its wait: it goes straight through."""
    effects: Counter[str] = Counter()
    app, change = approval_app(url, clock, effects)
    with app:
        app.enqueue("changes", change, [{"app_id": "a2"}])
        assert app.signal("changes/app_id=a2", "approval", {"ok": False})
        report = app.run_batch("changes", change, progress=False)
        assert report.completed == 1
        assert app.run(change, task_id="changes/app_id=a2", app_id="a2") == {
            "applied": False,
            "proposal": "raise a2",
        }
    assert effects == Counter({"propose": 1})


def test_a_timeout_resumes_the_task_with_a_timeout_result(url: str, clock: FakeClock) -> None:
    """Once the timeout has passed, a worker's claim takes the waiting task up
    again and the wait returns ``timed_out``; a late signal is refused."""
    effects: Counter[str] = Counter()
    app, change = approval_app(url, clock, effects)
    with app:
        app.enqueue("changes", change, [{"app_id": "a3"}])
        first = app.run_batch("changes", change, progress=False)
        assert first.counts == {"waiting": 1}
        clock.advance(3600)
        assert app.run_batch("changes", change, progress=False).counts == {"waiting": 1}
        clock.advance(8 * 3600)
        report = app.run_batch("changes", change, progress=False)
        assert report.counts == {"completed": 1}
        assert app.run(change, task_id="changes/app_id=a3", app_id="a3") == {
            "applied": False,
            "why": "no answer in 8 hours",
        }
        with pytest.raises(TaskError, match="is completed; it waits for no signal"):
            app.signal("changes/app_id=a3", "approval", {"ok": True})
    assert effects == Counter({"propose": 1})


def test_the_first_signal_of_a_name_stands(url: str, clock: FakeClock) -> None:
    """A second signal of the same name is refused (False) and the task sees the
    first payload."""
    effects: Counter[str] = Counter()
    app, change = approval_app(url, clock, effects)
    with app:
        with pytest.raises(TaskWaiting):
            app.run(change, task_id="c", app_id="a4")
        assert app.signal("c", "approval", {"ok": False})
        assert not app.signal("c", "approval", {"ok": True})
        assert app.run(change, task_id="c", app_id="a4")["applied"] is False


def test_signals_to_unknown_tasks_are_clear_errors(url: str, clock: FakeClock) -> None:
    """Signalling a task that does not exist names it; an empty name is refused."""
    effects: Counter[str] = Counter()
    app, change = approval_app(url, clock, effects)
    with app:
        with pytest.raises(UnknownTask, match="no task 'nope'"):
            app.signal("nope", "approval", None)
        with pytest.raises(TaskWaiting):
            app.run(change, task_id="c", app_id="a5")
        with pytest.raises(ValueError, match="needs a name"):
            app.signal("c", "", None)


def test_a_waiting_task_can_be_cancelled(url: str, clock: FakeClock) -> None:
    """`cairn cancel` takes a waiting task too; a signal after that is refused."""
    effects: Counter[str] = Counter()
    app, change = approval_app(url, clock, effects)
    with app:
        with pytest.raises(TaskWaiting):
            app.run(change, task_id="c", app_id="a6")
        assert admin(app.store).cancel_task("c", clock.now())
        assert app.store.get_task("c").status == "cancelled"  # type: ignore[union-attr]
        with pytest.raises(TaskError, match="cancelled"):
            app.signal("c", "approval", {"ok": True})


def test_cairn_signal_sends_a_json_payload_from_the_command_line(
    url: str, clock: FakeClock
) -> None:
    """`cairn signal TASK NAME JSON` wakes the task; bad JSON is one clear line,
    exit code 2, and sends nothing."""
    effects: Counter[str] = Counter()
    app, change = approval_app(url, clock, effects)
    with app:
        with pytest.raises(TaskWaiting):
            app.run(change, task_id="c", app_id="a7")
        runner = CliRunner()
        bad = runner.invoke(cli, ["signal", "c", "approval", "{ok: yes}", "--store", url])
        assert bad.exit_code == 2
        assert "the payload is not JSON" in bad.output
        assert app.store.get_signal("c", "approval") is None
        sent = runner.invoke(cli, ["signal", "c", "approval", '{"ok": true}', "--store", url])
        assert sent.exit_code == 0, sent.output
        assert "sent 'approval' to task c" in sent.output
        again = runner.invoke(cli, ["signal", "c", "approval", '{"ok": false}', "--store", url])
        assert "the first one stands" in again.output
        assert app.run(change, task_id="c", app_id="a7")["applied"] is True
    assert effects == Counter({"propose": 1, "apply": 1})


def test_an_async_task_waits_the_same_way(url: str, clock: FakeClock) -> None:
    """``ctx.wait_for`` in an ``async def`` task suspends and resumes likewise."""
    app = Cairn(url, clock=clock)

    @app.task
    async def gated(ctx: Context) -> Any:
        signal = ctx.wait_for("go")
        return signal.payload

    with app:
        with pytest.raises(TaskWaiting):
            app.run(gated, task_id="g")
        app.signal("g", "go", [1, 2])
        assert app.run(gated, task_id="g") == [1, 2]


def test_the_cli_lists_and_shows_waiting_tasks(url: str, clock: FakeClock) -> None:
    """`cairn batches`, `cairn tasks --status waiting` and `cairn show` handle a
    waiting task and its waiting entry."""
    effects: Counter[str] = Counter()
    app, change = approval_app(url, clock, effects)
    with app:
        app.enqueue("changes", change, [{"app_id": "a8"}])
        app.run_batch("changes", change, progress=False)
        runner = CliRunner()
        batches = runner.invoke(cli, ["batches", "--store", url])
        assert batches.exit_code == 0, batches.output
        assert "waiting" in batches.output
        tasks = runner.invoke(cli, ["tasks", "--status", "waiting", "--store", url])
        assert tasks.exit_code == 0, tasks.output
        assert "changes/app_id=a8" in tasks.output
        show = runner.invoke(cli, ["show", "changes/app_id=a8", "--store", url])
        assert show.exit_code == 0, show.output
        assert "approval" in show.output
        assert "or sooner when signalled" in show.output
        as_json = runner.invoke(cli, ["tasks", "--status", "waiting", "--store", url, "--json"])
        assert as_json.exit_code == 0, as_json.output
        (task,) = json.loads(as_json.stdout)
        assert task["status"] == "waiting"
        assert task["wake_at"] is not None


def test_a_waiting_task_moves_with_its_batch_and_keeps_its_signal(
    url: str, clock: FakeClock, tmp_path: Path
) -> None:
    """`cairn export` / `cairn import` carry a waiting task's status, timeout and a
    signal already sent; the task then resumes on the other store."""
    effects: Counter[str] = Counter()
    app, change = approval_app(url, clock, effects)
    moved = tmp_path / "moved.db"
    with app:
        app.enqueue("changes", change, [{"app_id": "a9"}])
        app.run_batch("changes", change, progress=False)
        app.signal("changes/app_id=a9", "approval", {"ok": True})
        out = io.StringIO()
        export_batch(app.store, None, "changes", out)
    other, change_there = approval_app(f"sqlite:///{moved}", clock, effects)
    with other:
        import_batch(other.store, None, out.getvalue().splitlines())
        row = other.store.get_task("changes/app_id=a9")
        assert row is not None
        assert row.status == "pending"  # woken by the signal before the export
        assert other.store.get_signal("changes/app_id=a9", "approval") is not None
        report = other.run_batch("changes", change_there, progress=False)
        assert report.counts == {"completed": 1}
    assert effects == Counter({"propose": 1, "apply": 1})


def test_a_crash_just_before_suspending_resumes_into_the_same_wait(
    url: str, clock: FakeClock
) -> None:
    """The process dies after recording the wait and before suspending: the
    restart replays the proposal (not run again), keeps the deadline recorded
    the first time, suspends, and completes once the signal comes."""
    effects: Counter[str] = Counter()
    app, change = approval_app(url, clock, effects)

    def die_before_suspend(point: str, task_id: str, seq: int, name: str) -> None:
        if point == "before_suspend":
            raise Crash("killed between recording the wait and suspending")

    set_fault_hook(app, die_before_suspend)
    with pytest.raises(Crash):
        app.run(change, task_id="c", app_id="b1")
    deadline = app.store.load_history("c")[2].retry_at
    app.close()
    clock.advance(LEASE + 3600)
    again = second_process(url, clock)
    with again:
        registered = again.task(name="change")(change.fn)
        with pytest.raises(TaskWaiting):
            again.run(registered, task_id="c", app_id="b1")
        row = again.store.get_task("c")
        assert row is not None
        assert row.wake_at == deadline  # the first deadline, not one from the restart
        again.signal("c", "approval", {"ok": True})
        assert again.run(registered, task_id="c", app_id="b1")["applied"] is True
    assert effects == Counter({"propose": 1, "apply": 1})
