"""A step inside a step is refused at once, with an error that says what to do.

A step's function runs as one recorded unit. If it calls ``ctx`` itself, the
inner entry takes a position while the outer one is still open; after an
ordinary retry the positions no longer line up, and the task used to fail with
a NonDeterminismError claiming the code had changed. Now the inner call raises
``NestedStepError`` where it is made, naming the task and both entries; it is
never retried, nothing is recorded for it, and an ``except Exception`` around
it cannot let the task carry on.
"""

from __future__ import annotations

import pytest

from cairn import Cairn, Context, NestedStepError, Retry, TaskFailed


def test_ctx_step_inside_a_step_fails_the_task_at_once_naming_both(any_app: Cairn) -> None:
    """The inner ctx.step raises NestedStepError inside the outer step's function;
    the task fails after one attempt (not three, whatever its retry policy), with
    the error naming the task, the inner and the outer step; the outer step's
    function ran once and nothing is recorded but the outer step's failure."""
    calls: list[str] = []

    def inner() -> str:
        calls.append("inner")
        return "inner"

    @any_app.task(retry=Retry(attempts=3, initial_delay=0))
    def outer_task(ctx: Context) -> str:
        def outer() -> str:
            calls.append("outer")
            return str(ctx.step("inner", inner))

        return str(ctx.step("outer", outer))

    with pytest.raises(TaskFailed) as failed:
        any_app.run(outer_task, task_id="nested")
    assert isinstance(failed.value.__cause__, NestedStepError)
    assert failed.value.error["type"] == "cairn.errors.NestedStepError"
    message = failed.value.error["message"]
    assert "task 'nested'" in message
    assert "step 'inner' was asked for from inside step 'outer'" in message
    assert "Call step 'inner' from the task function" in message
    assert calls == ["outer"]
    history = any_app.store.load_history("nested")
    assert [(r.name, r.status) for r in history.values()] == [("outer", "failed")]
    task = any_app.store.get_task("nested")
    assert task is not None
    assert (task.status, task.attempts) == ("failed", 1)


def test_swallowing_the_nested_error_does_not_let_the_task_carry_on(any_app: Cairn) -> None:
    """A step function that catches every error around its ctx.once still cannot
    go on: the run is poisoned, and the task fails with NestedStepError at its
    next ctx call. The once's function was never called."""
    charged: list[str] = []

    @any_app.task
    def careless(ctx: Context) -> str:
        def outer() -> str:
            try:
                ctx.once("charge/1", lambda key: charged.append(key))
            except Exception:  # noqa: BLE001 - the code under test swallows it
                return "swallowed"
            return "went on"

        ctx.step("outer", outer)
        return str(ctx.step("after", lambda: "after"))

    with pytest.raises(TaskFailed) as failed:
        any_app.run(careless, task_id="careless")
    assert failed.value.error["type"] == "cairn.errors.NestedStepError"
    assert charged == []
    assert any_app.store.get_operation("", "charge/1") is None


def test_a_map_item_that_uses_ctx_is_refused_too(any_app: Cairn) -> None:
    """A ctx.map item's function is a step as well: ctx.record inside it raises
    NestedStepError naming the item."""

    @any_app.task
    def mapped(ctx: Context) -> list[int]:
        def item(n: int) -> int:
            return int(ctx.record("peek", lambda: n))

        return list(ctx.map(item, [1, 2], concurrency=1))

    with pytest.raises(TaskFailed) as failed:
        any_app.run(mapped, task_id="mapped")
    assert failed.value.error["type"] == "cairn.errors.NestedStepError"
    assert "from inside step 'item[1]'" in failed.value.error["message"]


def test_ctx_calls_between_steps_and_app_run_inside_a_step_are_fine(any_app: Cairn) -> None:
    """Only ctx calls of the same task from inside one of its step functions are
    refused: the task function may call ctx freely, and a step function may run
    another task with app.run (its steps are that task's own)."""

    @any_app.task
    def helper(ctx: Context, n: int) -> int:
        return int(ctx.step("double", lambda: 2 * n))

    @any_app.task
    def parent(ctx: Context) -> int:
        first = int(ctx.step("one", lambda: 1))
        other = int(ctx.step("run another", lambda: any_app.run(helper, n=first)))
        return first + other + int(ctx.record("three", lambda: 3))

    assert any_app.run(parent, task_id="parent") == 1 + 2 + 3
