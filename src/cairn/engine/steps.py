"""The machines behind steps, recorded inputs, durable sleeps and whole tasks.

Each is a generator over ``_effects`` so sync and async code share it. The shape
of a step: look at the record for this position; if it holds a completed result,
return it without calling anything; otherwise call, retrying by the policy with
durable attempt counts, and write the outcome in one fenced commit.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from cairn.clock import from_iso, to_iso
from cairn.engine.permits import acquire, release
from cairn.engine.run import Call, Machine, TaskRun, Wait, describe_error
from cairn.retry import Retry
from cairn.store.records import StepKind, StepRecord, StepStatus

_SELF_DECODING = frozenset({int, str, bool, type(None)})


class EntryLabel:
    """Names the entry (and its position in the history) in an error message;
    formatted only if one is raised."""

    __slots__ = ("kind", "name", "seq")

    def __init__(self, kind: str, name: str, seq: int | None = None) -> None:
        self.kind = kind
        self.name = name
        self.seq = seq

    def __str__(self) -> str:
        label = "step" if self.kind == "step" else f"recorded {self.kind}"
        where = "" if self.seq is None else f" (position {self.seq})"
        return f"{label} {self.name!r}{where}"


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
    limit: str | None = None,
    seq: int | None = None,
) -> Machine[Any]:
    """Run ``fn`` as the history entry at the next position (or at ``seq``, for
    the items of a map), or replay it.

    ``limit`` names a shared limit: each call holds one of its permits (waited
    for without spending an attempt), given back when the call ends.
    """
    if seq is None:
        seq = run.next_seq()
    record = run.replayed(seq, kind, name)
    what = EntryLabel(kind, name, seq)
    if record is not None and record.status == "completed":
        return run.decode(record.output or "null", what)
    # Attempts are durable: a crash during attempt 3 resumes at attempt 3. The
    # budget restarts when a new task attempt replays into a failed step.
    total = 0 if record is None else record.attempts
    same_attempt = record is not None and record.task_attempt == run.attempt
    used = record.run_attempts if record is not None and same_attempt else 0
    deferred = record.deferred if record is not None and same_attempt else 0.0
    if record is not None and record.retry_at is not None and same_attempt:
        yield Wait(max(0.0, (record.retry_at - run.now()).total_seconds()))
    while True:
        started = run.now()
        run.hook(f"before_{kind}", run.task_id, seq, name)
        work = Call(fn, args, kwargs, (run, what))
        try:
            if limit is None:
                value = yield work
            else:
                value = yield from _limited(run, limit, work)
        except Exception as exc:
            total += 1
            # "Call again in N seconds" (RetryAfter) is waited out without
            # spending an attempt, up to the policy's max_deferral in all.
            pause = retry.deferral(exc, deferred)
            if pause is not None:
                deferred += pause
            else:
                used += 1
                if not retry.should_retry(exc, used):
                    run.write(
                        entry(
                            run,
                            seq,
                            kind,
                            name,
                            "failed",
                            attempts=total,
                            run_attempts=used,
                            error=exc,
                            started_at=started,
                            deferred=deferred,
                        )
                    )
                    raise
                pause = retry.delay(used)
            run.write(
                entry(
                    run,
                    seq,
                    kind,
                    name,
                    "retrying",
                    attempts=total,
                    run_attempts=used,
                    error=exc,
                    retry_at=run.now() + timedelta(seconds=pause),
                    started_at=started,
                    deferred=deferred,
                )
            )
            yield Wait(pause)
            continue
        # The at-least-once window: the work is done, nothing is recorded yet.
        run.hook(f"{kind}_returned", run.task_id, seq, name)
        # Encoding fails before anything is written, with the step named.
        output = run.encode(value, what)
        run.write(
            entry(
                run,
                seq,
                kind,
                name,
                "completed",
                output=output,
                attempts=total + 1,
                run_attempts=used + 1,
                started_at=started,
                deferred=deferred,
            )
        )
        run.hook(f"after_{kind}", run.task_id, seq, name)
        # Hand back the decoded value, so the first run sees exactly what a
        # replay would: the two can never behave differently. Immutable plain
        # scalars decode to themselves, so they skip the round trip.
        if type(value) in _SELF_DECODING:
            return value
        return run.decode(output, what)


def _limited(run: TaskRun, limit: str, call: Call) -> Machine[Any]:
    """``call`` while holding a permit of ``limit``; the permit is given back when
    the call ends, whatever the outcome (a crash leaves it to lapse with the lease)."""
    permit = yield from acquire(run, limit)
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
