"""Values and names no store can hold are refused before anything is written,
with an error naming the step, key or task and what to do.

A lone surrogate (``"abc\\ud800"``) anywhere in a recorded value is refused by the
codec, so it never reaches the driver (which used to raise UnicodeEncodeError
from inside the write). Names cairn stores and indexes are checked at the entry
points by ``cairn.names.check_name``.

Every test here runs on each backend (the conformance suite).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from cairn import (
    Cairn,
    CodecError,
    Context,
    InvalidName,
    TaskFailed,
)
from cairn.store import admin
from cairn.store.records import MessageRecord, NewTask

LONE = "\ud800"


def every_row(app: Cairn) -> dict[str, Any]:
    """Every row a run can write, for checking that nothing was."""
    tasks = list(admin(app.store).list_tasks())
    return {
        "tasks": [(t.id, t.status) for t in tasks],
        "histories": {t.id: sorted(app.store.load_history(t.id)) for t in tasks},
        "operations": [(o.key, o.status, o.result) for o in admin(app.store).list_operations()],
        "batches": [b.name for b in admin(app.store).batch_summaries()],
    }


# -- lone surrogates in values --------------------------------------------------------------


def test_a_step_returning_a_lone_surrogate_fails_naming_the_step_and_where(
    any_app: Cairn,
) -> None:
    """On either store, a step whose value holds a lone surrogate fails its task at
    once with a CodecError naming the step and its position in the history, where
    in the value it is and how to clean it; the step records nothing, and the
    steps before it stay recorded."""
    app = any_app

    @app.task
    def review(ctx: Context) -> Any:
        ctx.step("fetch", lambda: "settings")
        return ctx.step("analyze", lambda: {"reply": ["ok", "abc" + LONE]})

    with pytest.raises(TaskFailed) as failed:
        app.run(review, task_id="r")
    message = str(failed.value)
    assert "step 'analyze' (position 2): cannot record text holding a lone surrogate" in message
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
    (op,) = admin(app.store).list_operations()
    assert (op.key, op.status, op.result) == ("post/1", "in_doubt", None)
    assert calls == ["post/1"]


BAD_NAMES = {
    "empty": ("", "must not be empty or blank"),
    "blank": ("   ", "must not be empty or blank"),
    "too long": ("x" * 10_000, "is 10000 bytes long in UTF-8; cairn accepts up to 1000"),
    "lone surrogate": ("id\ud800", "holds a lone surrogate ('\\ud800' at position 2)"),
    "nul": ("id\x00", "holds a NUL character"),
}


@pytest.fixture(params=sorted(BAD_NAMES))
def bad_name(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(a name no store can hold, what the error says about it)."""
    return BAD_NAMES[request.param]


def _review(app: Cairn) -> Any:
    @app.task(name="review")
    def review(ctx: Context, app_id: str) -> str:
        return app_id

    return review


def test_a_task_id_no_store_can_hold_is_refused_before_anything_is_written(
    any_app: Cairn, bad_name: tuple[str, str]
) -> None:
    """On either store, app.run with a task id that is empty, blank, longer than an
    index holds (10,000 characters), or holds a lone surrogate or a NUL raises
    InvalidName saying what is wrong with the task id; no row is written."""
    name, says = bad_name
    review = _review(any_app)
    with pytest.raises(InvalidName) as refused:
        any_app.run(review, task_id=name, app_id="a1")
    assert refused.value.kind == "task id"
    assert says in str(refused.value)
    assert "Nothing was written" in str(refused.value)
    assert every_row(any_app) == {"tasks": [], "histories": {}, "operations": [], "batches": []}


def test_a_batch_name_or_item_key_no_store_can_hold_is_refused_before_anything_is_written(
    any_app: Cairn, bad_name: tuple[str, str]
) -> None:
    """On either store, a bad batch name (enqueue, run_batch), or a key= function
    giving a bad item key, raises InvalidName before any task or batch row is
    written."""
    name, says = bad_name
    review = _review(any_app)
    with pytest.raises(InvalidName, match="batch name") as refused:
        any_app.enqueue(name, review, [{"app_id": "a1"}])
    assert says in str(refused.value)
    with pytest.raises(InvalidName, match="batch name"):
        any_app.run_batch(name, review, [{"app_id": "a1"}], progress=False)
    if name.strip():  # an empty item key still gives a task id ("apps/")
        with pytest.raises(InvalidName, match="task id"):
            any_app.enqueue("apps", review, [{"app_id": "a1"}], key=lambda item: name)
    assert every_row(any_app) == {"tasks": [], "histories": {}, "operations": [], "batches": []}


def test_a_message_the_store_cannot_encode_is_a_codec_error_and_nothing_is_written(
    any_app: Cairn,
) -> None:
    """A conversation message holding a lone surrogate that reaches the store
    without the conversation's own check (a store method called directly) is
    refused with CodecError quoting the text, by append_message and by
    append_messages alike, on every backend; not the driver's raw
    UnicodeEncodeError. Nothing is written."""
    store = any_app.store
    now = any_app.clock.now()
    store.create_task(NewTask("talk/1", "talk", "{}", "json"), now)
    claimed = store.claim_task("talk/1", 0, "tester/1/1/x", now + timedelta(hours=1), now)
    assert claimed is not None
    conv = store.open_conversation("talk/1", "main", claimed.fence)
    assert conv is not None

    def message(idx: int, content: str) -> MessageRecord:
        return MessageRecord("talk/1", "main", idx, "user", content, 3, "message", None, None, now)

    bad = json.dumps({"role": "user", "content": "hi" + LONE}, ensure_ascii=False)
    writes: list[Callable[[], bool]] = [
        lambda: store.append_message(conv, message(0, bad), claimed.fence),
        lambda: store.append_messages(
            conv, [message(0, '{"role": "user", "content": "ok"}'), message(1, bad)], claimed.fence
        ),
    ]
    for write in writes:
        with pytest.raises(CodecError) as refused:
            write()
        assert "lone surrogate ('\\ud800'" in str(refused.value)
        assert "Nothing was written" in str(refused.value)
    assert store.load_messages("talk/1", "main", 0, 10) == []
