"""The machines behind steps, recorded inputs, durable sleeps and whole tasks.

Each is a generator over ``_effects`` so sync and async code share it. The shape
of a step: look at the record for this position; if it holds a completed result,
return it without calling anything; otherwise call, retrying by the policy with
durable attempt counts, and write the outcome in one fenced commit.

Each step's entry carries a fingerprint of its function's code
(``fingerprint_of``), and a replay compares it with the recorded one: a changed
step goes to the task's ``on_change`` policy (``cairn.engine.changes``). The
fingerprint is computed once per code object and kept here, so a step pays a
dictionary lookup for it and the hot path gains no module.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import io
import textwrap
import tokenize
from collections.abc import Callable
from datetime import datetime, timedelta
from types import CodeType
from typing import Any, NamedTuple

from cairn.clock import from_iso, to_iso
from cairn.engine.changes import changed
from cairn.engine.errortext import describe_error
from cairn.engine.meter import Meter, metered
from cairn.engine.permits import acquire, release
from cairn.engine.run import (
    Call,
    Machine,
    Persist,
    TaskRun,
    Wait,
    drive,
    inside_call,
    no_fault,
)
from cairn.limits import LimitRef, split_ref
from cairn.retry import Retry
from cairn.store.records import StepKind, StepRecord, StepStatus

_SELF_DECODING = frozenset({int, str, bool, type(None)})
# A record (or a label) from all its fields, without a NamedTuple __new__'s
# Python frame.
_new_record = tuple.__new__
_new_label = tuple.__new__


class EntryLabel(NamedTuple):
    """Names the entry (and its position in the history) in an error message;
    formatted only if one is raised. Carries the entry's fingerprint, which its
    records are written with.

    A NamedTuple: one is made per step, and ``tuple.__new__`` (``_new_label``)
    makes it without a Python frame, where a class's ``__init__`` has one."""

    kind: StepKind
    name: str
    seq: int
    fingerprint: str | None = None

    def __str__(self) -> str:
        label = "step" if self.kind == "step" else f"recorded {self.kind}"
        return f"{label} {self.name!r} (position {self.seq})"


def entry(
    run: TaskRun,
    seq: int,
    kind: StepKind,
    name: str,
    status: StepStatus,
    *,
    output: str | None = None,
    attempts: int,
    run_attempts: int,
    error: BaseException | None = None,
    retry_at: datetime | None = None,
    started_at: datetime,
    deferred: float = 0.0,
    fingerprint: str | None = None,
) -> StepRecord:
    # Positional: this runs once per step, and keywords cost measurably here.
    return StepRecord(
        run.task_id,
        seq,
        kind,
        name,
        status,
        output,
        attempts,
        run.attempt,
        run_attempts,
        None if error is None else describe_error(error),
        retry_at,
        started_at,
        run.now(),
        deferred,
        fingerprint,
    )


def record_completed(
    run: TaskRun, seq: int, kind: StepKind, name: str, output: str, started_at: datetime
) -> None:
    """Write a one-shot history entry (a map's head, a spawn, a join, a wait's
    answer, a durable sleep's wake-up time) as completed, under the fence."""
    run.write(
        entry(
            run,
            seq,
            kind,
            name,
            "completed",
            output=output,
            attempts=1,
            run_attempts=1,
            started_at=started_at,
        )
    )


def step_machine(
    run: TaskRun,
    kind: StepKind,
    name: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    retry: Retry,
    limit: LimitRef | Meter | None = None,
    seq: int | None = None,
    fingerprint: str | None = None,
) -> Machine[Any]:
    """Run ``fn`` as the history entry at the next position (or at ``seq``, for
    the items of a map), or replay it.

    ``limit`` names a shared limit: each call holds one of its permits (waited
    for without spending an attempt), given back when the call ends; a model
    call's ``Meter`` reserves its tokens and price instead (``cairn.engine.meter``).
    ``fingerprint`` says what produced the entry; a step's is its function's
    code (``fingerprint_of``), a recorded input has none.
    """
    if seq is None:
        seq = run.next_seq()
    record = run.replayed(seq, kind, name)
    what = _label(kind, name, seq, fn, fingerprint)
    if record is not None and record.status == "completed":
        record = _unless_changed(run, record, what)
        if record.status == "completed":
            return run.decode(record.output or "null", what)
    spent, pause = _resumed(run, record)
    return (yield from _calls(run, what, fn, args, kwargs, retry, limit, spent, pause))


def run_step(
    run: TaskRun,
    kind: StepKind,
    name: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    retry: Retry,
    limit: LimitRef | None = None,
) -> Any:
    """``step_machine`` for a sync function, run to its end in this thread.

    A replay and a first call that returns (nearly every step) are taken here
    without a generator, a driver loop and a ``Call``; the rest (a shared
    limit, a record to resume from, a retried call) go on in ``_calls``."""
    seq = run.next_seq()
    record = run.replayed(seq, kind, name)
    # _label, inline. The last step's code is kept with its fingerprint: a
    # loop of one step pays an identity test, not a lookup hashing the code.
    fingerprint = None
    if kind == "step":
        code = getattr(fn, "__code__", None)
        last = _last_fingerprint
        fingerprint = last[1] if last[0] is code is not None else _looked_up(fn, code)
    what: EntryLabel = _new_label(EntryLabel, (kind, name, seq, fingerprint))
    if record is not None:
        if record.status == "completed":
            # _unless_changed, its common answer inline: the code is unchanged.
            if record.fingerprint != fingerprint:
                record = _unless_changed(run, record, what)
            if record.status == "completed":
                return run.decode(record.output or "null", what)
        spent, pause = _resumed(run, record)
        return drive(_calls(run, what, fn, args, kwargs, retry, limit, spent, pause), run.clock)
    if limit is not None:
        machine = _calls(run, what, fn, args, kwargs, retry, limit, _Spent(0, 0, 0.0, False), None)
        return drive(machine, run.clock)
    # The first call, as ``drive`` performs a ``Call`` (entry marked running in this thread,
    # so a ctx call inside is refused; only an ``Exception`` handled; a BaseException passes).
    started = run.clock.now()
    run.in_flight = (seq, name, started)  # the heartbeat notes it (_entered, inline)
    if run.hook is not no_fault:
        run.hook(f"before_{kind}", run.task_id, seq, name)
    if run.observing:
        run.observe("call_started", seq, kind, name, call=1)
    token = inside_call.set((run, what))
    try:
        value = fn(*args, **kwargs)
    except Exception as exc:
        inside_call.reset(token)
        spent = _Spent(0, 0, 0.0, False)
        pause = _failed_call(run, what, exc, retry, spent, started)
        if pause is None:
            raise
        return drive(_calls(run, what, fn, args, kwargs, retry, limit, spent, pause), run.clock)
    except BaseException:
        inside_call.reset(token)
        raise
    inside_call.reset(token)
    return _returned(run, what, value, started)


def _returned(run: TaskRun, what: EntryLabel, value: Any, started: datetime) -> Any:
    """A first call returned ``value``: write its entry, in this thread, and hand
    back what a replay would return.

    ``_completed_entry``, ``_completed`` and ``_handed_back`` in one frame (each
    Python call costs measurably here), in the same order, with the same
    guarantees: the at-least-once window's hook, the encoding (which fails
    before anything is written, with the step named), the one fenced write,
    its hooks, and the decoded value."""
    task_id, seq, kind, name, hook = run.task_id, what.seq, what.kind, what.name, run.hook
    if hook is not no_fault:  # free when no test installed one
        hook(f"{kind}_returned", task_id, seq, name)
    step: StepRecord = _new_record(
        StepRecord,
        (
            task_id, seq, kind, name, "completed", run.encode(value, what), 1, run.attempt,
            1, None, None, started, run.clock.now(), 0.0, what.fingerprint, None,
        ),
    )  # fmt: skip
    group = run.group
    history = run.history
    if group is None:
        written = run.store.record_step(step, run.fence, first=seq not in history)
    else:
        written = group.record(step, run.fence, seq not in history)
    if not written:
        run.lost()
    history[seq] = step
    if hook is not no_fault:
        hook(f"after_{kind}", task_id, seq, name)
    if run.observing:
        run.observe("call_returned", seq, kind, name, call=1, value=value)
    # Immutable plain scalars decode to themselves and skip the round trip.
    if type(value) in _SELF_DECODING:
        return value
    return run.decode(step.output or "null", what)


def _label(
    kind: StepKind, name: str, seq: int, fn: Callable[..., Any], fingerprint: str | None
) -> EntryLabel:
    """The entry's label, with a step's fingerprint (its function's code)."""
    if fingerprint is None and kind == "step":
        # fingerprint_of's lookup, inline: a call costs more than the lookup itself.
        fingerprint = _FINGERPRINTS.get(getattr(fn, "__code__", None)) or fingerprint_of(fn)  # type: ignore[arg-type]
    return EntryLabel(kind, name, seq, fingerprint)


def _unless_changed(run: TaskRun, record: StepRecord, what: EntryLabel) -> StepRecord:
    """The completed ``record``, or what the task's ``on_change`` policy makes of
    it when its entry's code changed since it was recorded."""
    recorded = record.fingerprint
    fingerprint = what.fingerprint
    if recorded != fingerprint and recorded is not None and fingerprint is not None:
        return changed(run, record, what)
    return record


def _resumed(run: TaskRun, record: StepRecord | None) -> tuple[_Spent, float | None]:
    """What the step has spent, and the seconds left to wait before its next
    call when a crash came during a retry's backoff (None: call at once)."""
    spent = _Spent.resumed(run, record)
    if record is not None and record.retry_at is not None and spent.same_attempt:
        return spent, max(0.0, (record.retry_at - run.now()).total_seconds())
    return spent, None


def _calls(
    run: TaskRun,
    what: EntryLabel,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    retry: Retry,
    limit: LimitRef | Meter | None,
    spent: _Spent,
    pause: float | None,
) -> Machine[Any]:
    """Call ``fn`` until it returns or the retry policy gives up, recording each
    call; wait ``pause`` seconds first if it is not None."""
    seq, kind, name = what.seq, what.kind, what.name
    if pause is not None:
        yield Wait(pause)
    while True:
        started = run.now()
        run.hook(f"before_{kind}", run.task_id, seq, name)
        if run.observing:
            run.observe("call_started", seq, kind, name, call=spent.total + 1)
        work = Call(fn, args, kwargs, (run, what))
        try:
            if limit is None:
                value = yield work
            elif isinstance(limit, Meter):
                value = yield from metered(run, limit, work)
            else:
                value = yield from _limited(run, limit, work)
        except Exception as exc:
            pause = _failed_call(run, what, exc, retry, spent, started)
            if pause is None:
                raise
            yield Wait(pause)
            continue
        spent.total += 1
        spent.used += 1
        completed = _completed_machine(
            run, what, value, spent.total, spent.used, spent.deferred, started
        )
        return (yield from completed)


class _Spent:
    """What a step has spent so far: calls in all (``total``), attempts of this
    task attempt's budget (``used``), and seconds deferred by ``RetryAfter``."""

    __slots__ = ("deferred", "same_attempt", "total", "used")

    def __init__(self, total: int, used: int, deferred: float, same_attempt: bool) -> None:
        self.total = total
        self.used = used
        self.deferred = deferred
        self.same_attempt = same_attempt

    @classmethod
    def resumed(cls, run: TaskRun, record: StepRecord | None) -> _Spent:
        """Attempts are durable: a crash during attempt 3 resumes at attempt 3.
        The budget restarts when a new task attempt replays into a failed step."""
        if record is None:
            return cls(0, 0, 0.0, False)
        same = record.task_attempt == run.attempt
        used = record.run_attempts if same else 0
        return cls(record.attempts, used, record.deferred if same else 0.0, same)


def _failed_call(
    run: TaskRun, what: EntryLabel, exc: Exception, retry: Retry, spent: _Spent, started: datetime
) -> float | None:
    """Record a call that raised: as ``retrying`` (and the seconds to wait), or
    as ``failed`` when the policy gives up (None: the caller re-raises)."""
    spent.total += 1
    # "Call again in N seconds" (RetryAfter) is waited out without spending an
    # attempt, up to the policy's max_deferral in all.
    pause = retry.deferral(exc, spent.deferred)
    if pause is not None:
        spent.deferred += pause
    else:
        spent.used += 1
        if not retry.should_retry(exc, spent.used):
            run.write(_attempt_entry(run, what, "failed", spent, started, error=exc))
            _call_failed(run, what, spent, "failed", exc)
            return None
        pause = retry.delay(spent.used)
    retry_at = run.now() + timedelta(seconds=pause)
    run.write(_attempt_entry(run, what, "retrying", spent, started, error=exc, retry_at=retry_at))
    _call_failed(run, what, spent, "retrying", exc)
    return pause


def _call_failed(
    run: TaskRun, what: EntryLabel, spent: _Spent, status: str, exc: Exception
) -> None:
    run.observe(
        "call_failed", what.seq, what.kind, what.name, call=spent.total, status=status, error=exc
    )


def _completed(
    run: TaskRun,
    what: EntryLabel,
    value: Any,
    attempts: int,
    run_attempts: int,
    deferred: float,
    started: datetime,
) -> Any:
    """Record a call that returned (the ``attempts``-th in all, ``run_attempts``-th
    of this task attempt), in this thread, and hand back what a replay would return."""
    step = _completed_entry(run, what, value, attempts, run_attempts, deferred, started)
    # TaskRun.write, inline: this runs once per step, and each call costs measurably.
    group = run.group
    first = what.seq not in run.history
    if group is None:
        written = run.store.record_step(step, run.fence, first=first)
    else:
        written = group.record(step, run.fence, first)
    if not written:
        run.lost()
    run.history[what.seq] = step
    return _handed_back(run, what, value, step)


def _completed_machine(
    run: TaskRun,
    what: EntryLabel,
    value: Any,
    attempts: int,
    run_attempts: int,
    deferred: float,
    started: datetime,
) -> Machine[Any]:
    """``_completed`` for the machine: the write is yielded, not called, so an
    async task awaits its commit (group commit) and its event loop runs on."""
    step = _completed_entry(run, what, value, attempts, run_attempts, deferred, started)
    yield Persist(TaskRun.write, (run, step), {})
    return _handed_back(run, what, value, step)


def _completed_entry(
    run: TaskRun,
    what: EntryLabel,
    value: Any,
    attempts: int,
    run_attempts: int,
    deferred: float,
    started: datetime,
) -> StepRecord:
    """The completed entry of a call that returned ``value``, not yet written."""
    seq, kind, name = what.seq, what.kind, what.name
    # The at-least-once window: the work is done, nothing is recorded yet.
    if run.hook is not no_fault:  # free when no test installed one
        run.hook(f"{kind}_returned", run.task_id, seq, name)
    # Encoding fails before anything is written, with the step named.
    output = run.encode(value, what)
    # Built here, every field given, by tuple.__new__ (StepRecord's own __new__
    # is a Python function with defaults): this runs once per step, and each
    # call on that path costs measurably.
    return _new_record(
        StepRecord,
        (
            run.task_id, seq, kind, name, "completed", output, attempts, run.attempt,
            run_attempts, None, None, started, run.clock.now(), deferred, what.fingerprint,
            None,
        ),
    )  # fmt: skip


def _handed_back(run: TaskRun, what: EntryLabel, value: Any, step: StepRecord) -> Any:
    """After a completed entry is durable: the hooks, and the value to return."""
    seq, kind, name = what.seq, what.kind, what.name
    if run.hook is not no_fault:
        run.hook(f"after_{kind}", run.task_id, seq, name)
    if run.observing:
        run.observe("call_returned", seq, kind, name, call=step.attempts, value=value)
    # Hand back the decoded value, so the first run sees exactly what a replay
    # would: the two can never behave differently. Immutable plain scalars
    # decode to themselves, so they skip the round trip.
    if type(value) in _SELF_DECODING:
        return value
    return run.decode(step.output or "null", what)


def _attempt_entry(
    run: TaskRun,
    what: EntryLabel,
    status: StepStatus,
    spent: _Spent,
    started: datetime,
    *,
    output: str | None = None,
    error: BaseException | None = None,
    retry_at: datetime | None = None,
) -> StepRecord:
    """The history entry for the step's latest call, as ``spent`` counts it."""
    return entry(
        run,
        what.seq,
        what.kind,
        what.name,
        status,
        output=output,
        attempts=spent.total,
        run_attempts=spent.used,
        error=error,
        retry_at=retry_at,
        started_at=started,
        deferred=spent.deferred,
        fingerprint=what.fingerprint,
    )


def _limited(run: TaskRun, limit: LimitRef, call: Call) -> Machine[Any]:
    """``call`` while holding a permit of ``limit``; the permit is given back when
    the call ends, whatever the outcome (a crash leaves it to lapse with the lease)."""
    name, key = split_ref(limit)
    permit = yield from acquire(run, name, key)
    try:
        return (yield call)
    finally:
        release(run, permit)


def sleep_machine(run: TaskRun, seconds: float) -> Machine[None]:
    """Sleep until a recorded wake-up time; a resumed task sleeps only what is left."""
    seq = run.next_seq()
    record = run.replayed(seq, "sleep", "sleep")
    if record is None:
        started = run.now()
        wake = started + timedelta(seconds=seconds)
        record_completed(run, seq, "sleep", "sleep", to_iso(wake), started)
    else:
        wake = from_iso(record.output or to_iso(run.now()))
    remaining = (wake - run.now()).total_seconds()
    if remaining > 0:
        yield Wait(remaining)


# -- fingerprints ---------------------------------------------------------------------
# By code object: the same function (or lambda) is hashed once per process.
_FINGERPRINTS: dict[CodeType, str] = {}
# The last (code, fingerprint) a step looked up: one tuple, replaced whole, so
# threads sharing it never see a code with another's fingerprint.
_last_fingerprint: tuple[object, str | None] = (None, None)


def _looked_up(fn: Callable[..., Any], code: CodeType | None) -> str:
    """``fn``'s fingerprint, remembered as the last one looked up when it is
    its code's own: a decorator's wrapper (kept as "") shares its code with
    every function it wraps, so it is never remembered."""
    global _last_fingerprint
    found = _FINGERPRINTS.get(code)  # type: ignore[arg-type]
    if found:
        _last_fingerprint = (code, found)
        return found
    return fingerprint_of(fn)


def fingerprint_of(fn: Callable[..., Any]) -> str:
    """``code:`` and a hash of ``fn``'s source, tokens only: a change in its body
    changes it; comments, blank lines, spacing and moving it in the file do not.
    Without source (code made at run time), a hash of its bytecode."""
    # One attribute read and one lookup: this runs once per step. A wrapper's
    # code (functools.wraps) is kept as "" so its wrapped function is looked at.
    found = _FINGERPRINTS.get(getattr(fn, "__code__", None))  # type: ignore[arg-type]
    if found:
        return found
    return _first_fingerprint(fn)


def _first_fingerprint(fn: Callable[..., Any]) -> str:
    outer = getattr(fn, "__code__", None)
    if isinstance(outer, CodeType) and hasattr(fn, "__wrapped__"):
        _FINGERPRINTS[outer] = ""  # a decorator's wrapper: never its own fingerprint
    inner: Any = inspect.unwrap(fn)
    while isinstance(inner, functools.partial):
        inner = inner.func  # the function it calls (its bound arguments are data)
    code = getattr(inner, "__code__", None)
    if code is None:  # a callable object: its class's __call__
        code = getattr(getattr(type(inner), "__call__", None), "__code__", None)  # noqa: B004
    if not isinstance(code, CodeType):
        # A builtin: nothing of the user's to hash but its name.
        name = getattr(inner, "__qualname__", type(inner).__qualname__)
        return "code:" + _digest(str(name).encode())
    found = _FINGERPRINTS.get(code)
    if found is None:
        found = "code:" + _digest(_source_tokens(code) or _bytecode(code))
        _FINGERPRINTS[code] = found
    return found


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _source_tokens(code: CodeType) -> bytes | None:
    """The function's source as its tokens, without comments and layout."""
    try:
        lines, _ = inspect.getsourcelines(code)
    except (OSError, TypeError):
        return None
    words: list[str] = []
    skipped = {tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT}
    reader = io.StringIO(textwrap.dedent("".join(lines))).readline
    try:
        for token in tokenize.generate_tokens(reader):
            if token.type not in skipped:
                words.append(token.string)
    except (tokenize.TokenError, SyntaxError):
        pass  # a lambda cut out of a longer expression: its tokens so far will do
    return "\x00".join(words).encode() if words else None


def _bytecode(code: CodeType) -> bytes:
    """The code's instructions, names and constants (nested code included)."""
    parts = [code.co_code, " ".join(code.co_names).encode()]
    for const in code.co_consts:
        if isinstance(const, CodeType):
            parts.append(_bytecode(const))
        elif isinstance(const, frozenset):
            parts.append(repr(sorted(map(repr, const))).encode())
        else:
            parts.append(repr(const).encode())
    return b"\x00".join(parts)
