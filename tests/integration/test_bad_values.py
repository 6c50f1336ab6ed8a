"""Values and names no store can hold are refused before anything is written,
with an error naming the step, key or task and what to do.

A lone surrogate (``"abc\\ud800"``) anywhere in a recorded value is refused by the
codec, so it never reaches the driver (which used to raise UnicodeEncodeError
from inside the write). Names cairn stores and indexes are checked at the entry
points by ``cairn.names.check_name``.
"""

from __future__ import annotations

from typing import Any

import pytest

from cairn import Cairn, CodecError, Context, TaskArgumentsError, TaskFailed

LONE = "\ud800"


def _rows(app: Cairn) -> dict[str, Any]:
    """Every row a run can write, for checking that nothing was."""
    tasks = list(app.store.list_tasks())
    return {
        "tasks": [(t.id, t.status) for t in tasks],
        "histories": {t.id: sorted(app.store.load_history(t.id)) for t in tasks},
        "operations": [(o.key, o.status, o.result) for o in app.store.list_operations()],
        "batches": [b.name for b in app.store.batch_summaries()],
    }


# -- lone surrogates in values --------------------------------------------------------------


def test_a_step_returning_a_lone_surrogate_fails_naming_the_step_and_where(
    any_app: Cairn,
) -> None:
    """On either store, a step whose value holds a lone surrogate fails its task at
    once with a CodecError naming the step, where in the value it is and how to
    clean it; the step records nothing, and the steps before it stay recorded."""
    app = any_app

    @app.task
    def review(ctx: Context) -> Any:
        ctx.step("fetch", lambda: "settings")
        return ctx.step("analyze", lambda: {"reply": ["ok", "abc" + LONE]})

    with pytest.raises(TaskFailed) as failed:
        app.run(review, task_id="r")
    message = str(failed.value)
    assert "step 'analyze': cannot record text holding a lone surrogate" in message
    assert "found at $.reply[1]" in message
    assert "text.encode('utf-8', 'replace')" in message
    assert isinstance(failed.value.__cause__, CodecError)
    history = app.store.load_history("r")
    assert [(r.name, r.status) for r in history.values()] == [("fetch", "completed")]


def test_an_operation_returning_a_lone_surrogate_is_left_in_doubt_not_completed(
    any_app: Cairn,
) -> None:
    """On either store, ctx.once whose function returns a lone surrogate raises a
    CodecError naming the key; the key is left in doubt (its function ran, its
    result cannot be kept), never completed with a value that cannot be read
    back, and app.run returns instead of hanging."""
    app = any_app
    calls: list[str] = []

    def post(key: str) -> str:
        calls.append(key)
        return "sent" + LONE

    @app.task
    def notify(ctx: Context) -> Any:
        return ctx.once("post/1", post)

    with pytest.raises(TaskFailed) as failed:
        app.run(notify, task_id="n")
    assert "operation 'post/1': cannot record text holding a lone surrogate" in str(failed.value)
    (op,) = app.store.list_operations()
    assert (op.key, op.status, op.result) == ("post/1", "in_doubt", None)
    assert calls == ["post/1"]


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
    assert _rows(app) == {"tasks": [], "histories": {}, "operations": [], "batches": []}


def test_a_signal_payload_with_a_lone_surrogate_is_refused_and_not_sent(app: Cairn) -> None:
    """A signal whose payload holds a lone surrogate is a CodecError; the signal is
    not recorded, so a correct one can still be sent."""

    @app.task
    def approve(ctx: Context) -> Any:
        return ctx.wait_for("approval").payload

    app.enqueue("b", approve, [{}])
    (task,) = app.store.list_tasks()
    with pytest.raises(CodecError, match="lone surrogate"):
        app.signal(task.id, "approval", {"note": LONE})
    assert app.store.get_signal(task.id, "approval") is None
    assert app.signal(task.id, "approval", {"note": "ok"})
