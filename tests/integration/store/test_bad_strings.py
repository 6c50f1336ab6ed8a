"""Every string a user gives cairn, fed each kind of bad or odd text, on each store.

The promise: bad input gets a clear error and loses nothing. For each field (a
name cairn stores and indexes, a value it records, the text of an error raised
by user code) and each text below, one of two things happens, the same on
SQLite and PostgreSQL:

* accepted: what the store gives back (read by a later run, or by a new app) is
  the very same text, code point for code point;
* refused: a ``CairnError`` naming the field and saying what to do, raised
  before the store's driver sees the text (never a ``UnicodeEncodeError`` or a
  driver error), with nothing recorded before it lost.

Inside a task, a refusal fails the task (never left ``running``); the step
recorded before it stays recorded, and once the input is fixed the task runs
again, replays that step without calling it, and finishes. The text of an error
raised by user code is always recorded (a lone surrogate written as its escape,
with a note saying so; a megabyte cut to its start and end), and its task ends
failed.

Combining marks, right-to-left text, emoji, a BOM, zero-width and control
characters other than NUL are valid text: every field that has no length limit
accepts them, and every store gives them back as they were.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from cairn import Cairn, CairnError, Context, Rate, Retry, TaskFailed
from cairn.clock import FakeClock
from cairn.engine.errortext import SANITIZED_NOTE
from cairn.keys import bounded_key
from cairn.store import admin
from tests.integration.store.test_bad_values import every_row

SURROGATE = "report \udcff.txt"
NUL = "before\x00after"
MEGABYTE = ("a megabyte of text, \u00e9 and \U0001f600; " * 40_000)[:1_000_000]
TEXTS = {
    "lone surrogate": SURROGATE,
    "NUL": NUL,
    "1 MB": MEGABYTE,
    "combining marks": "e\u0301\u0308 a\u0338 Z\u0351\u0316\u0300",
    "right-to-left": "\u202eevil\u202c \u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u200f",
    "emoji": "\U0001f469\u200d\U0001f469\u200d\U0001f467 \U0001f1ef\U0001f1f5 \U0010ffff",
    "invisible": "\ufeff\u200b\u2028\u2029zero width",
    "controls": "\x01\x1f\x7f\r\n\t\x85 bell\x07",
}
GOOD = "fixed text"
# What each kind of field refuses. Everything else it accepts and gives back.
NAME = frozenset({"lone surrogate", "NUL", "1 MB"})  # indexed: at most 1,000 bytes
UNBOUNDED_NAME = frozenset({"lone surrogate", "NUL"})  # names with no length limit
VALUE = frozenset({"lone surrogate"})  # recorded values: JSON holds a NUL as \u0000
# What a refusal says to do, by the text's fault.
ADVICE = {
    "lone surrogate": "text.encode('utf-8', 'replace')",
    "NUL": "Remove it",
    "1 MB": "Use a shorter",
}


class Boom(Exception):
    """Raised after the field was fed, so that a later run replays what was recorded."""


@dataclass
class Probe:
    """What the next run of the probe task feeds into its field, and what ran."""

    text: str = GOOD
    fail_after: bool = True
    calls: Counter[str] = field(default_factory=Counter)

    def counted(self, name: str, value: Any = None) -> Callable[..., Any]:
        def run(*_: Any) -> Any:
            self.calls[name] += 1
            return value

        return run


@dataclass(frozen=True)
class Field:
    """One field fed from inside a task: ``feed(ctx, text)`` gives the text to
    the field and returns what the run learned; ``stored(app, task_id)`` reads
    back from the store what it holds (None: the run's return value is it)."""

    kind: str  # as the refusal names it
    refuses: frozenset[str]
    feed: Callable[[Context, str, Probe], Any]
    stored: Callable[[Cairn, str], Any] | None = None
    expected: Callable[[str], Any] = lambda text: text


def _history_name(seq: int) -> Callable[[Cairn, str], Any]:
    return lambda app, task_id: app.store.load_history(task_id)[seq].name


def _op_keys(app: Cairn, task_id: str) -> Any:
    return [op.key for op in admin(app.store).list_operations() if op.task_id == task_id]


def _op_scopes(app: Cairn, task_id: str) -> Any:
    return [op.scope for op in admin(app.store).list_operations() if op.task_id == task_id]


def _conversations(app: Cairn, task_id: str) -> Any:
    return [c.conv for c in admin(app.store).conversation_summaries(task_id)]


def _children(app: Cairn, task_id: str) -> Any:
    return admin(app.store).child_ids(task_id)


def _converse(ctx: Context, text: str, probe: Probe) -> Any:
    conv = ctx.conversation("main")
    conv.append({"role": "user", "content": text})
    return conv.messages[-1]["content"]


def _spawn(ctx: Context, child: Any, probe: Probe) -> Any:
    return ctx.spawn(child, key=probe.text).task_id


INSIDE = {
    "step name": Field(
        "step name", UNBOUNDED_NAME, lambda ctx, t, p: ctx.step(t, p.counted(t)), _history_name(2)
    ),
    "recorded input name": Field(
        "recorded input name", UNBOUNDED_NAME, lambda ctx, t, p: ctx.record(t, lambda: 1),
        _history_name(2),
    ),
    "map name": Field(
        "map name", UNBOUNDED_NAME, lambda ctx, t, p: ctx.map(str.upper, ["a", "b"], name=t),
        expected=lambda text: ["A", "B"],
    ),
    "map item key": Field(  # refused as the item key the user gave, not an operation key
        "ctx.map('m') item key", UNBOUNDED_NAME,
        lambda ctx, t, p: ctx.map(str.upper, ["a", "b"], name="m", key=lambda item: t + item),
        _history_name(3), lambda text: bounded_key(f"m[{text}a]"),  # item "a", after the head
    ),
    "operation key": Field(
        "operation key", UNBOUNDED_NAME, lambda ctx, t, p: ctx.once(t, p.counted("effect", 1)),
        _op_keys, lambda text: [bounded_key(text)],  # a long key is shortened by a hash
    ),
    "operation scope": Field(
        "operation scope", NAME,
        lambda ctx, t, p: ctx.once(ctx.task_id, p.counted("effect", 1), scope=t), _op_scopes,
        lambda text: [text],
    ),
    "conversation name": Field(
        "conversation name", NAME, lambda ctx, t, p: ctx.conversation(t).append(
            {"role": "user", "content": "hi"}
        ), _conversations, lambda text: [text],
    ),
    "patch name": Field(
        "patch name", NAME, lambda ctx, t, p: ctx.patched(t), _history_name(2),
        lambda text: f"patched {text}",
    ),
    "child task id": Field(
        "child task id", NAME, _spawn, _children,
        lambda text: None,  # checked in the test: the parent's id, "/", the key
    ),
    "step value": Field(
        "step 's'", VALUE, lambda ctx, t, p: ctx.step("s", lambda: {"text": t})["text"]
    ),
    "recorded input value": Field(
        "recorded input 'r'", VALUE, lambda ctx, t, p: ctx.record("r", lambda: [t])[0]
    ),
    "operation result": Field(
        "operation", VALUE, lambda ctx, t, p: ctx.once(ctx.task_id, lambda key: t)
    ),
    "conversation message": Field("conversation 'main', message", VALUE, _converse),
    "system prompt": Field(
        "conversation 'main', message", VALUE,
        lambda ctx, t, p: ctx.conversation("main", system=t).system_prompt,
    ),
}  # fmt: skip


def _child(ctx: Context) -> int:
    return 1


def _probe_app(app: Cairn, feed: Callable[[Context, str, Probe], Any]) -> tuple[Any, Probe]:
    """Register the probe task (and the child it may spawn) on ``app``: it records
    a step, then feeds the probe's text to the field."""
    probe = Probe()
    child = app.task(name="child")(_child)

    @app.task(name="probe", retry=Retry(attempts=1))
    def probe_task(ctx: Context) -> Any:
        ctx.step("before", probe.counted("before"))
        learned = feed(ctx, probe.text, probe) if feed is not _spawn else _spawn(ctx, child, probe)
        if probe.fail_after:
            raise Boom("after the field was fed")
        return learned

    return probe_task, probe


def _assert_refused_by_cairn(error: BaseException, kind: str, fault: str) -> None:
    """``error`` is a CairnError raised by cairn's own check (no driver error or
    UnicodeEncodeError anywhere in its chain), naming ``kind`` and saying what to do."""
    assert isinstance(error, CairnError), repr(error)
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in chain:
        chain.append(current)
        # What a traceback of it shows: its cause, or the error it was raised
        # while handling unless that was suppressed ("from None").
        shown = current.__context__ if not current.__suppress_context__ else None
        current = current.__cause__ or shown
    for link in chain:
        assert not isinstance(link, UnicodeError), f"a raw encoding error: {link!r}"
        assert type(link).__module__.split(".")[0] not in ("sqlite3", "psycopg"), repr(link)
    assert kind in str(error), str(error)[:300]
    assert ADVICE[fault] in str(error), str(error)[:300]


@pytest.mark.parametrize("name", sorted(INSIDE))
def test_a_field_fed_inside_a_task_is_given_back_or_refused_and_the_task_recovers(
    any_app: Cairn, name: str
) -> None:
    """On either store, each field fed inside a task with each text: accepted, a
    later run replays it and the store gives back the same text; refused, the
    task ends failed (not running) with a CairnError naming the field and what
    to do, its first step stays recorded, and with the input fixed the task runs
    again without calling that step and finishes."""
    spec = INSIDE[name]
    task, probe = _probe_app(any_app, spec.feed)
    for fault, text in TEXTS.items():
        probe.text, probe.fail_after, probe.calls = text, True, Counter()
        task_id = f"{name}: {fault}"
        with pytest.raises(TaskFailed) as failed:
            any_app.run(task, task_id=task_id)
        record = any_app.store.get_task(task_id)
        assert record is not None
        assert record.status == "failed", (fault, record)
        refused = fault in spec.refuses
        cause = failed.value.__cause__
        assert cause is not None
        if refused:
            _assert_refused_by_cairn(cause, spec.kind, fault)
            assert failed.value.error["type"].startswith("cairn.errors."), failed.value.error
        else:
            assert isinstance(cause, Boom), (fault, str(cause)[:300])
        history = any_app.store.load_history(task_id)
        assert (history[1].name, history[1].status) == ("before", "completed"), fault

        # Run it again: the fixed input if it was refused, the same one if not.
        if refused and name == "operation result":
            # Its function ran but its result could not be kept: the key is in
            # doubt, for a person to settle (here: it did not happen, call again).
            (op,) = [op for op in admin(any_app.store).list_operations() if op.key == task_id]
            assert op.status == "in_doubt"
            assert admin(any_app.store).resolve_operation(
                "", task_id, "released", result=None, permanent=False, now=any_app.clock.now()
            )
        assert admin(any_app.store).retry_task(task_id, any_app.clock.now())
        probe.fail_after, probe.text = False, GOOD if refused else text
        effects = probe.calls["effect"]
        learned = any_app.run(task, task_id=task_id)
        record = any_app.store.get_task(task_id)
        assert record is not None
        assert record.status == "completed", fault
        assert probe.calls["before"] == 1, f"{fault}: the recorded step ran again"
        if "effect" in probe.calls:
            assert probe.calls["effect"] == (effects or 1), f"{fault}: an effect ran twice"
        if refused:
            continue
        if spec.stored is None:  # the run's answer was replayed from the store
            assert learned == spec.expected(text), fault
        elif name == "child task id":
            assert _children(any_app, task_id) == [f"{task_id}/{text}"], fault
        else:
            assert spec.stored(any_app, task_id) == spec.expected(text), fault
        with Cairn(any_app.store_url, clock=FakeClock()) as fresh:  # another app reads it
            _probe_app(fresh, spec.feed)
            assert fresh.result(task_id) == learned, fault


ERRORS: dict[str, Callable[[Context, str, Probe], Any]] = {
    "a step": lambda ctx, t, p: ctx.step("s", _raise, t),
    "an operation": lambda ctx, t, p: ctx.once(ctx.task_id, lambda key: _raise(t)),
    "the task": lambda ctx, t, p: _raise(t),
}


def _raise(text: str) -> None:
    if text != GOOD:
        raise ValueError(text)


@pytest.mark.parametrize("where", sorted(ERRORS))
def test_an_error_message_of_any_text_is_recorded_and_the_task_ends_failed(
    any_app: Cairn, where: str
) -> None:
    """On either store, an exception raised by user code in a step, an operation
    or the task itself, whose message holds any of the texts (a NUL, a lone
    surrogate, a megabyte): the task ends failed, never left running; the
    message is recorded as raised (a lone surrogate as its escape, with a note
    saying so; a megabyte as its start and end around a line saying how much
    was cut, test_long_errors.py); TaskFailed quotes it; and the task, retried,
    finishes."""
    task, probe = _probe_app(any_app, ERRORS[where])
    for fault, text in TEXTS.items():
        probe.text, probe.fail_after, probe.calls = text, False, Counter()
        task_id = f"error in {where}: {fault}"
        with pytest.raises(TaskFailed) as failed:
            any_app.run(task, task_id=task_id)
        record = any_app.store.get_task(task_id)
        assert record is not None
        assert record.status == "failed", fault
        error = failed.value.error
        assert error["type"] == "builtins.ValueError", fault
        if fault == "lone surrogate":
            assert error["message"] == "report \\udcff.txt"
            assert error["note"] == SANITIZED_NOTE
            assert SANITIZED_NOTE in str(failed.value)
        elif fault == "1 MB":
            assert error["message"].startswith(text[:10_000]), fault
            assert "characters here: a recorded error is kept to 64 KiB" in error["message"]
        else:
            assert error["message"] == text, fault
            assert "note" not in error, fault
        assert admin(any_app.store).retry_task(task_id, any_app.clock.now())
        probe.text = GOOD
        any_app.run(task, task_id=task_id)
        assert probe.calls["before"] == 1, f"{fault}: the recorded step ran again"


class Unprintable(Exception):
    """An exception whose ``str()`` raises."""

    def __str__(self) -> str:
        raise RuntimeError("no message")


def test_an_error_whose_str_raises_fails_its_task_instead_of_leaving_it_running(
    any_app: Cairn,
) -> None:
    """On either store, a task that raises an exception whose own ``str()``
    raises ends failed with that exception's type recorded and a message saying
    its text cannot be shown (it was left ``running`` before, the failure never
    recorded); in a step too."""

    def unprintable() -> None:
        raise Unprintable()

    @any_app.task(retry=Retry(attempts=1))
    def in_task(ctx: Context) -> None:
        raise Unprintable()

    @any_app.task(retry=Retry(attempts=1))
    def in_step(ctx: Context) -> None:
        ctx.step("s", unprintable)

    for task in (in_task, in_step):
        with pytest.raises(TaskFailed, match="its str\\(\\) raised RuntimeError") as failed:
            any_app.run(task, task_id=task.name)
        assert failed.value.error["type"].endswith("Unprintable")
        record = any_app.store.get_task(task.name)
        assert record is not None
        assert record.status == "failed"


# -- fields given outside a task ------------------------------------------------------------


def _review(app: Cairn) -> Any:
    @app.task(name="review")
    def review(ctx: Context, note: str) -> str:
        return ctx.step("echo", lambda: note)

    return review


def _give(app: Cairn, name: str, text: str) -> str:
    """Give ``text`` to field ``name``; the id of the task it made."""
    review = _review(app)
    if name == "task id":
        app.run(review, task_id=text, note="n")
        return text
    if name == "batch name":
        app.run_batch(text, review, [{"note": "n"}], key=lambda item: "one", progress=False)
        return f"{text}/one"
    task_id = f"arguments of {len(text)} characters, {text[:4].encode('unicode_escape')!r}"
    app.run(review, task_id=task_id, note=text)
    return task_id


OUTSIDE = {
    "task id": ("task id", NAME),
    "batch name": ("batch name", NAME),
    "task arguments": ("its arguments cannot be recorded", VALUE),
}


@pytest.mark.parametrize("name", sorted(OUTSIDE))
def test_a_field_given_outside_a_task_is_given_back_or_refused_with_nothing_written(
    store_url: str, name: str
) -> None:
    """On either store, a task id, batch name or task argument of each text is
    either accepted and read back the same by another app, or refused with a
    CairnError naming it and what to do, before any row is written."""
    kind, refuses = OUTSIDE[name]
    for fault, text in TEXTS.items():
        with Cairn(store_url, clock=FakeClock()) as app:
            before = every_row(app)
            if fault in refuses:
                with pytest.raises(CairnError) as refused:
                    _give(app, name, text)
                _assert_refused_by_cairn(refused.value, kind, fault)
                assert every_row(app) == before, fault
                continue
            task_id = _give(app, name, text)
        with Cairn(store_url, clock=FakeClock()) as fresh:  # another app reads it back
            _review(fresh)
            record = fresh.store.get_task(task_id)
            assert record is not None
            assert record.id == task_id, fault
            assert fresh.result(task_id) == (text if name == "task arguments" else "n"), fault
            if name == "batch name":
                assert text in [b.name for b in admin(fresh.store).batch_summaries()], fault


def test_signal_names_and_payloads_of_any_text_are_given_back_or_refused(
    any_app: Cairn,
) -> None:
    """On either store, a signal name of each text is refused (InvalidName naming
    it) when no store can hold it, else delivered under that very name; a
    payload of each text is refused (CodecError) only for a lone surrogate, else
    the waiting task receives it unchanged. A refused signal is not recorded, and
    a good one sent after it wakes the task."""

    @any_app.task(name="waiter")
    def waiter(ctx: Context, signal: str) -> Any:
        return ctx.wait_for(signal).payload

    for fault, text in TEXTS.items():
        for part in ("name", "payload"):
            task_id = f"wait {part}: {fault}"
            signal = text if part == "name" and fault not in NAME else "go"
            if part == "name" and fault in NAME:
                any_app.enqueue(task_id, waiter, [{"signal": "go"}], key=lambda item: "w")
            else:
                any_app.enqueue(task_id, waiter, [{"signal": signal}], key=lambda item: "w")
            waiting = f"{task_id}/w"
            name, payload = (text, "p") if part == "name" else ("go", {"note": text})
            refuses = NAME if part == "name" else VALUE
            if fault in refuses:
                with pytest.raises(CairnError) as refused:
                    any_app.signal(waiting, name, payload)
                kind = "signal name" if part == "name" else "lone surrogate"
                _assert_refused_by_cairn(refused.value, kind, fault)
                assert any_app.store.get_signal(waiting, "go") is None
                assert any_app.signal(waiting, "go", "fixed")
                assert _finish(any_app, waiter, waiting) == "fixed"
                continue
            assert any_app.signal(waiting, name, payload)
            assert _finish(any_app, waiter, waiting) == payload, fault


def _finish(app: Cairn, task: Any, task_id: str) -> Any:
    from cairn.worker import Worker

    Worker(app, burst=True).run()
    return app.result(task_id)


def test_schedule_and_limit_names_of_any_text_are_given_back_or_refused(
    any_app: Cairn,
) -> None:
    """On either store, a schedule name of each text no store can hold is refused
    with InvalidName naming it; any other is recorded under that very name when
    the schedule is first seen. A limit name the same, when the app is made."""

    @any_app.task(name="nightly")
    def nightly(ctx: Context, fired_at: Any) -> None:
        return None

    for fault, text in TEXTS.items():
        if fault in NAME:
            with pytest.raises(CairnError) as refused:
                any_app.schedule("30 4 * * *", name=text)(nightly)
            _assert_refused_by_cairn(refused.value, "schedule name", fault)
            with pytest.raises(CairnError) as refused:
                Cairn(any_app.store_url, limits={text: Rate(1)})
            _assert_refused_by_cairn(refused.value, "limit name", fault)
            continue
        any_app.schedule("30 4 * * *", name=text)(nightly)
    any_app.fire_due_schedules()
    stored = sorted(s.name for s in admin(any_app.store).list_schedules())
    assert stored == sorted(t for f, t in TEXTS.items() if f not in NAME)


@pytest.mark.parametrize("fault", sorted(TEXTS))
def test_a_cron_expression_or_time_zone_of_bad_text_is_a_configuration_error(
    any_app: Cairn, fault: str
) -> None:
    """A cron expression or a time zone holding any of the texts is refused with
    a ConfigurationError saying what a good one looks like (a megabyte-long time
    zone was a raw OSError, "File name too long"), its text cut short."""

    @any_app.task(name="nightly")
    def nightly(ctx: Context, fired_at: Any) -> None:
        return None

    text = TEXTS[fault]
    for cron, tz, says in ((f"30 4 * * * {text}", "UTC", "cron"), ("30 4 * * *", text, "IANA")):
        with pytest.raises(CairnError, match=says) as refused:
            any_app.schedule(cron, tz=tz, name="nightly")(nightly)
        assert len(str(refused.value)) < 1000
    assert admin(any_app.store).list_schedules() == []


def test_the_store_itself_turns_text_it_cannot_encode_into_a_codec_error(
    store_url: str,
) -> None:
    """On either store, text that reaches the store holding a lone surrogate
    (a command-line argument that is not UTF-8: `cairn show $'bad\\xff'`) raises
    a CodecError saying how to clean it, not the driver's UnicodeEncodeError;
    the store still works afterwards (its connection was not spoiled)."""
    from cairn import CodecError
    from cairn.store import open_store

    store = open_store(store_url)
    try:
        for _ in range(2):  # the second time on the same (pooled) connection
            with pytest.raises(CodecError, match="lone surrogate") as refused:
                store.get_task("bad\udcff")
            # Chained from the driver's error, as every store error is (the
            # store's own translation, not a check before it).
            assert isinstance(refused.value.__cause__, UnicodeEncodeError)
            assert ADVICE["lone surrogate"] in str(refused.value)
        assert store.get_task("good") is None
    finally:
        store.close()
