"""The machine behind ``ctx.once``: claim, act, record.

1. Claim: insert the key as ``claimed`` and commit, before the function runs.
2. Act: call the function with the key, which it can forward as the outside
   system's own idempotency key. Just before the call, the process makes sure
   it still holds its task's lease by its own monotonic clock (a lease confirmed
   less than half a lease ago), renewing it at once (fenced) if not: a process
   that wakes from a pause longer than its lease finds its task taken, or its
   claim taken, and never makes the call.
3. Record: store the result (the operation row is the task's history entry),
   fenced on the claiming task. A claimant that lost its task meanwhile writes
   nothing into the history its successor owns; it keeps what it learned only
   as the key's late result, for the audit.

Finding the key already there: completed → its result, without calling; claimed
by a live attempt → wait for it; claimed by an attempt that died → in doubt, and
the policy decides (reconcile, retry with the same key, or stop with
``InDoubtOperation``). An in-doubt key is never silently run again.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from cairn.engine.owners import ClaimantState, claimant_may_act, claimant_state
from cairn.engine.run import Call, Machine, Persist, TaskRun, Wait, no_fault
from cairn.errors import (
    CodecError,
    InDoubtOperation,
    LeaseLost,
    OperationFailed,
    StoreUnavailable,
)
from cairn.retry import Retry, is_permanent
from cairn.store.records import OperationClaim, OperationRecord, StepRecord

OnDoubt = Literal["raise", "retry"]
Reconcile = Callable[[str], Any]
# The operation whose function runs in this context: (run, scope, key, claim
# number), for ctx.before_send(); None outside an operation's function.
_sending: ContextVar[tuple[TaskRun, str, str, int] | None] = ContextVar(
    "cairn_sending", default=None
)
# Renewals tried, one after the other, to get a fresh lease before an outside
# call; each is a full round trip, so only a store slower than half a lease
# per answer runs out of them.
_RENEWALS_BEFORE_CALL = 5


@dataclass(frozen=True, slots=True)
class OncePolicy:
    """How one operation behaves when things go wrong."""

    retry: Retry
    scope: str = ""
    reconcile: Reconcile | None = None
    on_doubt: OnDoubt = "raise"


def _claimant(run: TaskRun, op: OperationRecord) -> ClaimantState:
    """``alive``: it may still record, wait for it. ``dead``: its task no longer
    runs under the claim's fence, or its lease lapsed (the store checks that
    again when the claim is taken). ``gone``: this process knows it cannot
    record (its process is dead, or it was this very task's earlier attempt)."""
    if op.task_id == run.task_id and op.claim_fence == run.fence:
        # Our own task, under our fence: another position of this run acting on
        # the same key right now (a map), or an attempt of ours that raised.
        return "alive" if (op.scope, op.key) in run.acting else "gone"
    return claimant_state(op, run.store.get_task(op.task_id), run.now(), run.takeover_grace)


def resolve_command(key: str, scope: str) -> str:
    """The ``cairn ops resolve`` command line for a key, quoted for a shell."""
    scoped = f" --scope {shlex.quote(scope)}" if scope else ""
    return f"cairn ops resolve {shlex.quote(key)}{scoped}"


def _in_doubt_error(op: OperationRecord, may_act: str | None) -> InDoubtOperation:
    if may_act is None:
        fate = "its process died, or was paused and cannot act any more"
    else:
        fate = (
            f"its process died, or was paused and may still wake and send its request "
            f"({may_act}; unless the operation's function calls ctx.before_send() right "
            "before it sends, which stops such a process)"
        )
    return InDoubtOperation(
        f"operation {op.key!r}{' in scope ' + repr(op.scope) if op.scope else ''} is in "
        f"doubt: task {op.task_id!r} claimed it, then its lease lapsed before it recorded "
        f"whether the outside world acted: {fate}. cairn will not call it again on its "
        f"own. Check the outside system, then settle it: "
        f"`{resolve_command(op.key, op.scope)} --result JSON` (it happened), `--retry` (it "
        "did not; call again), or `--fail`. Or give the operation reconcile= or "
        "on_doubt='retry'.",
        key=op.key,
        scope=op.scope,
    )


def once_machine(
    run: TaskRun,
    key: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    policy: OncePolicy,
    seq: int | None = None,
) -> Machine[Any]:
    """Run ``fn(key, *args, **kwargs)`` at most once per key, or replay its result,
    as the entry at the next position (or at ``seq``, one reserved before)."""
    if seq is None:
        seq = run.next_seq()
    record = run.replayed(seq, "op", key)
    what = f"operation {key!r}"
    if record is not None and record.status == "completed":
        return run.decode(record.output or "null", what)
    scope = policy.scope
    used = 0
    started = run.now()
    hooked = run.hook is not no_fault  # free when no test installed one
    while True:
        # The claim nearly every operation gets at once, taken here; anything
        # else (the key already there) is looked into by _claim. Yielded (group
        # commit): an async task awaits it; either way it returns once durable.
        claim = yield Persist(TaskRun.claim_operation, (run, scope, key, seq), {})
        if claim.claimed:
            calls: int | _Settled = 1
        else:
            calls = yield from _claim(run, seq, key, policy, started, claim)
        if not isinstance(calls, int):
            return calls.value  # the key was settled: its result
        if hooked:
            run.hook("after_claim", run.task_id, seq, key)
        run.acting.add((scope, key))
        try:
            if not _still_claimant(run, scope, key, calls):
                continue  # another attempt took the key while we were away: look again
            outer = _sending.get()  # for ctx.before_send() inside fn; set back below
            _sending.set((run, scope, key, calls))
            try:
                value = yield Call(fn, (key, *args), kwargs)
            except Exception as exc:
                used += 1
                _settle_failure(run, scope, key, calls, exc)
                if not policy.retry.should_retry(exc, used):
                    raise
                yield Wait(policy.retry.delay(used))
                continue
            finally:
                _sending.set(outer)
            if hooked:
                run.hook("after_act", run.task_id, seq, key)
            output = _encoded(run, scope, key, calls, value, what)
            recorded = yield from _record(run, seq, key, calls, output, started, scope, hooked)
        finally:
            run.acting.discard((scope, key))
        if recorded is not None:
            return recorded.value
        # Our claim was taken while we acted (our lease had lapsed): the new
        # claimant decides; our outcome is kept as the key's late result.


@dataclass(frozen=True, slots=True)
class _Settled:
    """The key's outcome, found instead of a claim of our own."""

    value: Any


_RECLAIM = object()
# The row moved on while we looked (its claimant recorded after all): read again.
_LOOK_AGAIN = object()


def _claim(
    run: TaskRun,
    seq: int,
    key: str,
    policy: OncePolicy,
    started: datetime,
    refused: OperationClaim,
) -> Machine[int | _Settled]:
    """Claim the key for this attempt (its claim number), or find its outcome,
    after the claim ``refused`` was not granted."""
    scope = policy.scope
    given: OperationClaim | None = refused
    while True:
        # The refused claim first; each later look (after a wait, or a claimant
        # that moved meanwhile) claims again.
        claim = given or run.claim_operation(scope, key, seq)
        given = None
        if claim.fenced_out:
            run.lost()
        if claim.claimed:
            return 1
        op = claim.record
        assert op is not None
        if op.status == "completed":
            return _Settled(_adopt(run, seq, key, op, started))
        if op.status == "failed" and op.permanent:
            raise OperationFailed(
                f"operation {key!r} failed permanently earlier ({_error_summary(op)}); it is "
                f"not called again. Settle it with `{resolve_command(key, scope)} --retry` to "
                "allow another call.",
                key=key,
                scope=scope,
            )
        claimant: ClaimantState = "dead"
        if op.status == "claimed":
            claimant = _claimant(run, op)
            if claimant == "alive":
                yield Wait(run.poll_interval)
                continue
        if op.status in ("claimed", "in_doubt"):
            settled = yield from _settle_doubt(run, seq, key, op, policy, started)
            if settled is _LOOK_AGAIN:
                continue
            if settled is not _RECLAIM:
                return _Settled(settled)
        retaken = run.reclaim_operation(op, seq, claimant_gone=claimant == "gone")
        if retaken.claimed:
            return op.calls + 1
        # Someone else moved first, or the claimant renewed after all (look
        # again), or our own task is not ours any more (LeaseLost).
        run.check_still_ours()


def _still_claimant(run: TaskRun, scope: str, key: str, calls: int) -> bool:
    """Just before the outside call: True if this attempt still holds its task's
    lease (confirmed less than half a lease ago by this process's monotonic
    clock, or renewed now) and still holds claim ``calls`` of the key.

    A process paused past its lease wakes here: its task was taken (the renewal
    is refused: ``LeaseLost``), or its claim was (False: look again), or neither
    (the renewal makes it live again, and the store's own checks keep anyone from
    taking the task or the claim after that)."""
    if run.leases.fresh(run.task_id, run.fence):
        return True
    for _ in range(_RENEWALS_BEFORE_CALL):
        if not run.leases.renew_now(run.task_id, run.fence):
            run.lost()
        if run.leases.fresh(run.task_id, run.fence):
            break
    else:
        raise StoreUnavailable(
            f"task {run.task_id!r}, operation {key!r}: the store answered too slowly to "
            "confirm the task's lease before the outside call, so it was not made. "
            "Nothing was lost; run again once the store answers promptly."
        )
    op = run.store.get_operation(scope, key)
    return (
        op is not None
        and op.status == "claimed"
        and op.calls == calls
        and op.task_id == run.task_id
        and op.claim_fence == run.fence
    )


def before_send(run: TaskRun) -> None:
    """``ctx.before_send()``: the just-in-time guard an operation's function
    calls right before its request leaves the machine.

    A lease confirmed less than half a lease ago (by this process's monotonic
    and wall clocks) has at least half a lease to run: return at once, after a
    few microseconds and no round trip. Otherwise the process may have been
    paused past its lease (SIGSTOP, a suspended machine) since the check
    ``ctx.once`` made before calling the function: renew the lease now, fenced,
    and make sure this attempt still holds its claim of the key; if either was
    taken, raise ``LeaseLost`` and send nothing. Outside an operation it checks
    (and renews) the task's lease alone."""
    if run.leases.fresh(run.task_id, run.fence):
        return
    acting = _sending.get()
    if acting is None or acting[0] is not run:
        if not run.leases.renew_now(run.task_id, run.fence):
            run.lost()
        return
    _, scope, key, calls = acting
    if not _still_claimant(run, scope, key, calls):
        raise LeaseLost(run.task_id)


def before_send_here() -> None:
    """``cairn.before_send()``: ``ctx.before_send()`` for an operation's function
    that has no ``ctx`` at hand (a plain function passed to ``ctx.once``, an
    ``@operation``). Inside an operation's function it guards that operation;
    anywhere else it does nothing (no key is claimed there, so there is no
    claim to lose), so the same function still runs when called directly."""
    acting = _sending.get()
    if acting is not None:
        before_send(acting[0])


def _settle_failure(run: TaskRun, scope: str, key: str, calls: int, error: Exception) -> None:
    """``fn`` raised: record claim ``calls`` as failed (a call that raised counts
    as not having happened), unless the task is no longer ours."""
    if not run.settle_operation(
        scope, key, calls, "failed", error=error, permanent=is_permanent(error)
    ):
        run.check_still_ours()  # LeaseLost if it was taken; else the claim moved on


def _encoded(run: TaskRun, scope: str, key: str, calls: int, value: Any, what: str) -> str:
    try:
        return run.encode(value, what)
    except CodecError as exc:
        # Never complete a key with garbage: leave it in doubt for a person.
        run.settle_operation(scope, key, calls, "in_doubt", error=exc)
        raise


def _settle_doubt(
    run: TaskRun,
    seq: int,
    key: str,
    op: OperationRecord,
    policy: OncePolicy,
    started: datetime,
) -> Machine[Any]:
    """Decide about a key whose claimant died: a result, ``_RECLAIM`` or ``_LOOK_AGAIN``."""
    if policy.reconcile is not None:
        found = yield Call(policy.reconcile, (key,), {})
        if found is None:
            return _RECLAIM  # the outside world says it did not happen: call again
        output = run.encode(found, f"reconciled result of operation {key!r}")
        if not run.settle_operation(op.scope, key, op.calls, "completed", result=output):
            run.check_still_ours()
            return _LOOK_AGAIN  # it moved meanwhile; look again
        return _adopt(run, seq, key, run.store.get_operation(op.scope, key) or op, started)
    if policy.on_doubt == "retry":
        return _RECLAIM
    may_act = None
    if op.task_id != run.task_id or op.claim_fence != run.fence:  # not our own attempt
        claimant = run.store.get_task(op.task_id)
        may_act = claimant_may_act(op, claimant, run.now(), run.leases.lease)
    doubt = _in_doubt_error(op, may_act)
    # Keep the reason in the audit log, so `cairn ops` can say why. If the row
    # is no longer this claim (its claimant recorded the moment we looked), it
    # was never in doubt: look again.
    if op.status == "claimed" and not run.settle_operation(
        op.scope, key, op.calls, "in_doubt", error=doubt
    ):
        run.check_still_ours()
        return _LOOK_AGAIN
    raise doubt


def _adopt(run: TaskRun, seq: int, key: str, op: OperationRecord, started: datetime) -> Any:
    """The key completed elsewhere (or earlier): record its result in our history."""
    output = op.result or "null"
    run.write(_completed_entry(run, seq, key, output, 0, started))
    return run.decode(output, f"operation {key!r}")


def _completed_entry(
    run: TaskRun, seq: int, key: str, output: str, calls: int, started: datetime
) -> StepRecord:
    """The history entry of a completed operation (``calls``: made by this run)."""
    # Positional: this runs once per operation.
    return StepRecord(
        run.task_id, seq, "op", key, "completed", output, calls, run.attempt, calls,
        None, None, started, run.now(),
    )  # fmt: skip


def _record(
    run: TaskRun,
    seq: int,
    key: str,
    calls: int,
    output: str,
    started: datetime,
    scope: str,
    hooked: bool,
) -> Machine[_Settled | None]:
    """Record claim ``calls`` completed with ``output``, fenced on our task. None
    if the claim was taken from us meanwhile (our task is still ours: look again)."""
    step = _completed_entry(run, seq, key, output, calls, started)
    # Yielded (group commit): an async task awaits the commit holding it.
    record = (run, scope, key, calls, output, step)
    completed = yield Persist(TaskRun.complete_operation, record, {})
    if not completed:
        # We acted, but the key or the task is no longer ours: keep what we
        # learned for the audit, and change nothing else.
        run.record_late_result(scope, key, output)
        run.check_still_ours()
        return None
    if hooked:
        run.hook("after_record", run.task_id, seq, key)
    return _Settled(run.decode(output, f"operation {key!r}"))


def _error_summary(op: OperationRecord) -> str:
    if not op.error:
        return "no error recorded"
    error = json.loads(op.error)
    return f"{error.get('type', '?')}: {error.get('message', '')}"
