"""The machine behind ``ctx.once``: claim, act, record.

1. Claim: insert the key as ``claimed`` and commit, before the function runs.
2. Act: call the function with the key, which it can forward as the outside
   system's own idempotency key.
3. Record: store the result (and the task's history entry) in one commit.

Finding the key already there: completed → its result, without calling; claimed
by a live attempt → wait for it; claimed by an attempt that died → in doubt, and
the policy decides (reconcile, retry with the same key, or stop with
``InDoubtOperation``). An in-doubt key is never silently run again.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from cairn._effects import Call, Machine, Wait
from cairn._machines import entry
from cairn._taskrun import TaskRun, describe_error
from cairn.errors import CodecError, InDoubtOperation, OperationFailed
from cairn.ownership import owner_is_gone
from cairn.retry import Retry, is_permanent
from cairn.store.records import OperationRecord

OnDoubt = Literal["raise", "retry"]
Reconcile = Callable[[str], Any]


@dataclass(frozen=True, slots=True)
class OncePolicy:
    """How one operation behaves when things go wrong."""

    retry: Retry
    scope: str = ""
    reconcile: Reconcile | None = None
    on_doubt: OnDoubt = "raise"


def _claimant_alive(run: TaskRun, op: OperationRecord) -> bool:
    """True if the attempt holding the claim may still record an outcome."""
    if op.task_id == run.task_id:
        # Our own task: a claim under an older fence is an attempt that died.
        return op.claim_fence == run.fence
    task = run.store.get_task(op.task_id)
    if task is None or task.status != "running" or task.fence != op.claim_fence:
        return False
    expired = task.lease_expires_at is not None and task.lease_expires_at < run.now()
    return not expired and not owner_is_gone(task.owner)


def resolve_command(key: str, scope: str) -> str:
    """The ``cairn ops resolve`` command line for a key, quoted for a shell."""
    scoped = f" --scope {shlex.quote(scope)}" if scope else ""
    return f"cairn ops resolve {shlex.quote(key)}{scoped}"


def _in_doubt_error(run: TaskRun, op: OperationRecord) -> InDoubtOperation:
    return InDoubtOperation(
        f"operation {op.key!r}{' in scope ' + repr(op.scope) if op.scope else ''} is in "
        f"doubt: task {op.task_id!r} claimed it and died before recording whether the "
        "outside world acted. cairn will not call it again on its own. Check the outside "
        f"system, then settle it: `{resolve_command(op.key, op.scope)} --result JSON` (it "
        "happened), `--retry` (it did not; call again), or `--fail`. Or give the "
        "operation reconcile= or on_doubt='retry'.",
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
) -> Machine[Any]:
    """Run ``fn(key, *args, **kwargs)`` at most once per key, or replay its result."""
    seq = run.next_seq()
    record = run.replayed(seq, "op", key)
    what = f"operation {key!r}"
    if record is not None and record.status == "completed":
        return run.decode(record.output or "null", what)
    scope = policy.scope
    used = 0
    started = run.now()
    while True:
        claim = run.store.claim_operation(scope, key, run.task_id, seq, run.fence, run.now())
        if claim.fenced_out:
            run.lost()
        op = claim.record
        if not claim.claimed:
            assert op is not None
            if op.status == "completed":
                return _adopt(run, seq, key, op, started)
            if op.status == "failed" and op.permanent:
                raise OperationFailed(
                    f"{what} failed permanently earlier ({_error_summary(op)}); it is not "
                    f"called again. Settle it with `{resolve_command(key, scope)} --retry` to "
                    "allow another call.",
                    key=key,
                    scope=scope,
                )
            if op.status == "claimed" and _claimant_alive(run, op):
                yield Wait(run.poll_interval)
                continue
            if op.status in ("claimed", "in_doubt"):
                settled = yield from _settle_doubt(run, seq, key, op, policy, started)
                if settled is _LOOK_AGAIN:
                    continue
                if settled is not _RECLAIM:
                    return settled
            claim = run.store.reclaim_operation(
                scope, key, op.calls, run.task_id, seq, run.fence, run.now()
            )
            if not claim.claimed:
                if claim.record is None:
                    run.lost()
                continue  # someone else moved first: look again
            calls = op.calls + 1
        else:
            calls = 1
        run.hook("after_claim", run.task_id, seq, key)
        try:
            value = yield Call(fn, (key, *args), kwargs)
        except Exception as exc:
            used += 1
            permanent = not policy.retry.should_retry(exc, used)
            run.store.settle_operation(
                scope,
                key,
                calls,
                "failed",
                error=describe_error(exc),
                permanent=is_permanent(exc),
                now=run.now(),
            )
            if permanent:
                raise
            yield Wait(policy.retry.delay(used))
            continue
        run.hook("after_act", run.task_id, seq, key)
        try:
            output = run.encode(value, what)
        except CodecError as exc:
            # Never complete a key with garbage: leave it in doubt for a person.
            run.store.settle_operation(
                scope,
                key,
                calls,
                "in_doubt",
                error=describe_error(exc),
                permanent=False,
                now=run.now(),
            )
            raise
        return _record(run, seq, key, calls, output, started, scope)


_RECLAIM = object()
# The row moved on while we looked (its claimant recorded after all): read again.
_LOOK_AGAIN = object()


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
        if not run.store.settle_operation(
            op.scope,
            key,
            op.calls,
            "completed",
            result=output,
            error=None,
            permanent=False,
            now=run.now(),
        ):
            return _RECLAIM  # it moved meanwhile; look again
        return _adopt(run, seq, key, run.store.get_operation(op.scope, key) or op, started)
    if policy.on_doubt == "retry":
        return _RECLAIM
    doubt = _in_doubt_error(run, op)
    # Keep the reason in the audit log, so `cairn ops` can say why. If the row
    # is no longer this claim (its claimant recorded the moment we looked), it
    # was never in doubt: look again.
    if op.status == "claimed" and not run.store.settle_operation(
        op.scope,
        key,
        op.calls,
        "in_doubt",
        error=describe_error(doubt),
        permanent=False,
        now=run.now(),
    ):
        return _LOOK_AGAIN
    raise doubt


def _adopt(run: TaskRun, seq: int, key: str, op: OperationRecord, started: datetime) -> Any:
    """The key completed elsewhere (or earlier): record its result in our history."""
    output = op.result or "null"
    run.write(
        entry(
            run,
            seq,
            "op",
            key,
            "completed",
            output=output,
            attempts=0,
            run_attempts=0,
            started_at=started,
        )
    )
    return run.decode(output, f"operation {key!r}")


def _record(
    run: TaskRun, seq: int, key: str, calls: int, output: str, started: datetime, scope: str
) -> Any:
    step = entry(
        run,
        seq,
        "op",
        key,
        "completed",
        output=output,
        attempts=calls,
        run_attempts=calls,
        started_at=started,
    )
    _, step_recorded = run.store.complete_operation(scope, key, calls, output, step, run.fence)
    if not step_recorded:
        run.lost()
    run.history[seq] = step
    run.hook("after_record", run.task_id, seq, key)
    return run.decode(output, f"operation {key!r}")


def _error_summary(op: OperationRecord) -> str:
    if not op.error:
        return "no error recorded"
    error = json.loads(op.error)
    return f"{error.get('type', '?')}: {error.get('message', '')}"
