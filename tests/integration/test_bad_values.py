"""Values and names no store can hold are refused before anything is written,
with an error naming the step, key or task and what to do.

A lone surrogate (``"abc\\ud800"``) anywhere in a recorded value is refused by the
codec, so it never reaches the driver (which used to raise UnicodeEncodeError
from inside the write). Names cairn stores and indexes are checked at the entry
points by ``cairn.names.check_name``.

The tests on every backend are in ``store/test_bad_values.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from cairn import (
    Cairn,
    CodecError,
    Context,
    InvalidName,
    Retry,
    TaskArgumentsError,
    TaskFailed,
)
from cairn.store import admin
from tests.integration.store.test_bad_values import LONE, every_row


def test_an_error_message_with_a_lone_surrogate_is_recorded_escaped(app: Cairn) -> None:
    """A step that raises an error whose message holds a lone surrogate (a file
    name decoded with surrogateescape) fails as any error does: the message is
    recorded with the surrogate written as its escape, the task ends failed
    (not left running with an empty error), and TaskFailed quotes it."""

    def read() -> str:
        raise ValueError("cannot read b\udcff.txt")

    @app.task(retry=Retry(attempts=1))
    def load(ctx: Context) -> str:
        return ctx.step("read", read)

    with pytest.raises(TaskFailed, match=r"ValueError: cannot read b\\udcff\.txt") as failed:
        app.run(load, task_id="l")
    assert failed.value.error["message"] == "cannot read b\\udcff.txt"
    record = app.store.get_task("l")
    assert record is not None
    assert record.status == "failed"
    (step,) = app.store.load_history("l").values()
    assert (step.name, step.status) == ("read", "failed")


def test_a_task_result_with_a_lone_surrogate_fails_the_task_naming_it(app: Cairn) -> None:
    """A task whose return value holds a lone surrogate (in a dict key here) fails
    with a CodecError naming the task's result and the key; no result is stored."""

    @app.task
    def summarise(ctx: Context) -> dict[str, int]:
        return {"caf\udce9": 1}

    with pytest.raises(TaskFailed, match=r"'summarise' result.*found at \$\.keys\(\)\[0\]"):
        app.run(summarise, task_id="s")
    record = app.store.get_task("s")
    assert record is not None
    assert record.result is None


def test_arguments_with_a_lone_surrogate_are_refused_before_anything_is_written(
    app: Cairn,
) -> None:
    """Task arguments holding a lone surrogate raise TaskArgumentsError naming the
    task and the argument; no task and no batch is written."""

    @app.task
    def review(ctx: Context, app_id: str) -> str:
        return app_id

    with pytest.raises(TaskArgumentsError, match=r"task 'review'.*found at \$\.app_id"):
        app.run(review, app_id="a" + LONE)
    with pytest.raises(TaskArgumentsError):
        app.run_batch("apps", review, [{"app_id": "a1"}, {"app_id": LONE}], progress=False)
    assert every_row(app) == {"tasks": [], "histories": {}, "operations": [], "batches": []}


def test_a_signal_payload_with_a_lone_surrogate_is_refused_and_not_sent(app: Cairn) -> None:
    """A signal whose payload holds a lone surrogate is a CodecError; the signal is
    not recorded, so a correct one can still be sent."""

    @app.task
    def approve(ctx: Context) -> Any:
        return ctx.wait_for("approval").payload

    app.enqueue("b", approve, [{}])
    (task,) = admin(app.store).list_tasks()
    with pytest.raises(CodecError, match="lone surrogate"):
        app.signal(task.id, "approval", {"note": LONE})
    assert app.store.get_signal(task.id, "approval") is None
    assert app.signal(task.id, "approval", {"note": "ok"})


def test_a_default_task_id_too_long_for_an_index_is_refused(app: Cairn) -> None:
    """A task id cairn builds (task name / item key) is checked too: a long task
    name makes it too long, and app.run says so naming the task id."""

    @app.task(name="r" * 995)
    def long_named(ctx: Context, n: int) -> int:
        return n

    with pytest.raises(InvalidName, match=r"task id 'rrr.*\(1003 characters\) is 1003 bytes"):
        app.run(long_named, n=12345)
    assert every_row(app)["tasks"] == []


BAD_ONCE = [
    ("post/\ud800", "", "operation key"),
    ("post/a\x00", "", "operation key"),
    ("post/1", "team\ud800", "operation scope"),
    ("post/1", "x" * 2000, "operation scope"),
]


def test_operation_keys_and_scopes_no_store_can_hold_fail_the_task_before_claiming(
    app: Cairn,
) -> None:
    """ctx.once with a key or a scope that holds a lone surrogate or a NUL, or a
    scope too long for an index (a long key is shortened by hashing instead),
    raises InvalidName naming it inside the task, before the key is claimed: no
    operation row, and the function is not called."""
    calls: list[str] = []

    @app.task
    def post(ctx: Context, case: int) -> Any:
        key, scope = ("p" * 5000, "") if case < 0 else BAD_ONCE[case][:2]
        return ctx.once(key, lambda k: calls.append(k), scope=scope)

    for case, (_, _, kind) in enumerate(BAD_ONCE):
        with pytest.raises(TaskFailed, match=kind) as failed:
            app.run(post, case=case)
        assert isinstance(failed.value.__cause__, InvalidName)
    assert list(admin(app.store).list_operations()) == []
    assert calls == []
    assert app.run(post, case=-1) is None
    (op,) = admin(app.store).list_operations()
    assert len(op.key) <= 200


def test_signal_names_no_store_can_hold_are_refused_on_both_sides(app: Cairn) -> None:
    """app.signal and ctx.wait_for refuse a signal name holding a lone surrogate,
    a NUL or too many bytes; app.signal refuses such a task id too (InvalidName,
    not a driver error); no signal row is written."""

    @app.task
    def approve(ctx: Context, bad: bool) -> Any:
        return ctx.wait_for("wait\ud800" if bad else "approval").payload

    app.enqueue("b", approve, [{"bad": False}])
    (task,) = admin(app.store).list_tasks()
    for name in ("ok\ud800", "ok\x00", "n" * 1001):
        with pytest.raises(InvalidName, match="signal name"):
            app.signal(task.id, name, None)
    with pytest.raises(InvalidName, match="task id"):
        app.signal("b/\ud800", "approval", None)
    with pytest.raises(TaskFailed, match="signal name"):
        app.run(approve, bad=True)
    assert app.store.get_signal(task.id, "approval") is None


def test_conversation_schedule_limit_task_and_child_names_are_checked_where_given(
    app: Cairn,
) -> None:
    """A conversation, schedule, limit, task or child key name that no store can
    hold is refused where it is given (ctx.conversation, @app.schedule,
    Cairn(limits=...), @app.task, ctx.spawn), with InvalidName naming the kind."""
    from cairn import Rate

    with pytest.raises(InvalidName, match="limit name"):
        Cairn(app.store_url, limits={"api\x00": Rate(1)})
    with pytest.raises(InvalidName, match="task name"):
        app.task(name="bad\ud800")(lambda ctx: None)

    @app.task
    def nightly(ctx: Context, fired_at: Any) -> None:
        return None

    with pytest.raises(InvalidName, match="schedule name"):
        app.schedule("30 4 * * *", name="n" * 1001)(nightly)

    @app.task
    def child(ctx: Context) -> int:
        return 1

    @app.task
    def agent(ctx: Context, where: str) -> Any:
        if where == "conversation":
            return ctx.conversation("main\ud800")
        return ctx.spawn(child, key="k\x00")

    with pytest.raises(TaskFailed, match="conversation name"):
        app.run(agent, where="conversation")
    with pytest.raises(TaskFailed, match="child task id"):
        app.run(agent, where="spawn")
    assert [t.name for t in admin(app.store).list_tasks()] == ["agent", "agent"]
