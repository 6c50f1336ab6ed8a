"""Operations (``ctx.once`` keys) as an operator sees them, and settling one.

A key is in doubt when the attempt that claimed it died between claiming and
recording: cairn cannot know whether the outside world acted, so it never calls
the function again on its own. A claim whose attempt crashed stays ``claimed``
until some run looks at the key, so each claim's attempt is judged here (task
row, fence, lease, owner process: ``engine.owners.claim_abandoned``) rather than
trusting the status.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from itertools import islice
from typing import Any

from cairn.admin.audit import Actor, audit
from cairn.clock import SystemClock
from cairn.codec import JsonCodec, codec_for
from cairn.engine.owners import (
    DEFAULT_LEASE_SECONDS,
    claim_abandoned,
    claimant_may_act,
    takeover_grace,
)
from cairn.errors import CairnError
from cairn.store import AdminStore
from cairn.store.records import OperationRecord, TaskRecord

__all__ = [
    "DEFAULT_GRACE",
    "OperationView",
    "Resolved",
    "in_doubt",
    "operations",
    "resolve",
]

# A reader without the app (the CLI, the dashboard) judges claims by the default lease.
DEFAULT_GRACE = takeover_grace(timedelta(seconds=DEFAULT_LEASE_SECONDS))
# The sentences' results are cut to this many characters.
_RESULT_WIDTH = 60


@dataclass(frozen=True, slots=True)
class OperationView:
    """An operation with the task that claimed it. ``claimant_gone``: still
    claimed by an attempt that cannot record; ``in_doubt``: marked in doubt or so."""

    record: OperationRecord
    in_doubt: bool
    claimant_gone: bool
    task: TaskRecord | None  # the task that claimed it, if it still exists

    @property
    def waiting(self) -> str | None:
        """What a key that is not settled waits for, in words, unless an error
        it recorded says more: a claim in progress, or in doubt."""
        if self.record.status == "claimed":
            return "in doubt: its claimant died" if self.claimant_gone else "in progress"
        if self.record.status == "in_doubt" and self.record.error is None:
            return "in doubt"
        return None

    @property
    def codec(self) -> str:
        """The codec of the key's result: its claiming task's."""
        return self.task.codec if self.task is not None else "unknown"


def _views(
    store: AdminStore, ops: Iterator[OperationRecord], now: datetime
) -> Iterator[OperationView]:
    tasks: Callable[[str], TaskRecord | None] = cache(store.get_task)
    for op in ops:
        task = tasks(op.task_id)
        gone = claim_abandoned(op, task, now, DEFAULT_GRACE)
        yield OperationView(op, op.status == "in_doubt" or gone, gone, task)


def operations(
    store: AdminStore,
    *,
    task_id: str | None = None,
    prefix: str | None = None,
    statuses: tuple[str, ...] | None = None,
    since: datetime | None = None,
    only_in_doubt: bool = False,
    limit: int | None = 200,
    now: datetime | None = None,
) -> list[OperationView]:
    """Up to ``limit`` operations (None: all), oldest first, each judged at
    ``now`` (default: the system clock's now)."""
    now = now or SystemClock().now()
    if only_in_doubt:
        statuses = ("claimed", "in_doubt")
    # Dead claims are found by looking, so the store cannot apply the limit then.
    records = store.list_operations(
        prefix=prefix,
        since=since,
        task_id=task_id,
        statuses=statuses,
        limit=None if only_in_doubt else limit,
    )
    try:
        views = _views(store, records, now)
        if only_in_doubt:
            views = (view for view in views if view.in_doubt)
        return list(islice(views, limit))
    finally:
        close = getattr(records, "close", None)
        if close is not None:
            close()


def in_doubt(store: AdminStore, now: datetime, *, limit: int | None = 200) -> list[OperationView]:
    """The keys in doubt at ``now``: marked so, or claimed by an attempt that died."""
    return operations(store, only_in_doubt=True, limit=limit, now=now)


# -- settling a key -----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Resolved:
    """What came of settling a key: ``found`` False if there is no such key;
    ``changed``; the sentences to show, in order; and a note to add, if any."""

    found: bool
    changed: bool
    messages: list[str]
    note: str | None = None
    # Nothing was done because the key's claimant may still act: settling it
    # as not happened needs the operator's confirmation (``confirmed=True``).
    needs_confirmation: bool = False

    @property
    def message(self) -> str:
        return "\n".join(self.messages)


def label(op: OperationRecord) -> str:
    """``'key'``, or ``'key' in scope 's'``."""
    return repr(op.key) + (f" in scope {op.scope!r}" if op.scope else "")


def _refusal(op: OperationRecord, task: TaskRecord | None, now: datetime) -> str | None:
    if op.status == "completed":
        return (
            f"operation {label(op)} is completed already; a completed key cannot be "
            "resolved. Nothing changed."
        )
    if op.status == "claimed" and not claim_abandoned(op, task, now, DEFAULT_GRACE):
        return (
            f"operation {label(op)} is claimed by task {op.task_id}, which is still running "
            "and may record an outcome; wait for it (or stop it), then look again. "
            "Nothing changed."
        )
    return None


def encode_result(value: Any, task: TaskRecord | None) -> str:
    """The result as its task's codec stores it (JSON text for the JSON codec);
    ``CairnError`` if that codec cannot store it."""
    if task is None or task.codec == "json":
        return JsonCodec().encode(value)
    try:
        return codec_for(task.codec, trust_pickle=True).encode(value)  # encodes only
    except CairnError as exc:
        raise CairnError(
            f"cannot store the result with task {task.id}'s codec {task.codec!r}: {exc}"
        ) from exc


def _effect(status: str, text: str | None) -> str:
    if status == "completed":
        shown = text or ""
        shown = shown if len(shown) <= _RESULT_WIDTH else shown[: _RESULT_WIDTH - 3] + "..."
        return f"result {shown}; later calls return it without calling the function"
    if status == "released":
        return "the next call with this key calls the function again"
    return "later calls raise OperationFailed without calling the function"


def resolve(
    store: AdminStore,
    scope: str,
    key: str,
    status: str,
    *,
    result: Any = None,
    permanent: bool,
    now: datetime,
    actor: Actor | None = None,
    confirmed: bool = False,
) -> Resolved:
    """Settle a key that is not completed: ``completed`` with ``result`` (it
    happened), ``released`` (it did not; call again) or ``failed`` (give up).
    A failed claiming task goes back to pending, unless the key was given up on.
    ``released`` for a key whose claimant may still wake and act (its process
    still exists here, or it claimed the key only a few leases ago) is refused
    with a warning (``needs_confirmation``) unless ``confirmed``.
    Written to the audit trail as ``actor``."""
    target = f"operation {key}" + (f" (scope {scope})" if scope else "")
    detail = {"status": status, "permanent": permanent, "confirmed": confirmed}
    with audit(store, actor, "resolve", target, now, detail) as entry:
        done = _resolve(store, scope, key, status, result, permanent, now, confirmed)
        entry.done(int(done.changed), "; ".join(done.messages))
    return done


def _resolve(
    store: AdminStore,
    scope: str,
    key: str,
    status: str,
    result: Any,
    permanent: bool,
    now: datetime,
    confirmed: bool,
) -> Resolved:
    op = store.get_operation(scope, key)
    if op is None:
        where = f" in scope {scope!r}" if scope else ""
        return Resolved(
            False, False, [f"no operation {key}{where} in {store.url}; list keys with `cairn ops`"]
        )
    task = store.get_task(op.task_id)
    refusal = _refusal(op, task, now)
    if refusal is not None:
        return Resolved(True, False, [refusal])
    if status == "released" and not confirmed:
        warning = _may_still_act(op, task, now)
        if warning is not None:
            return Resolved(True, False, [warning], needs_confirmation=True)
    text = encode_result(result, task) if status == "completed" else None
    if not store.resolve_operation(scope, key, status, result=text, permanent=permanent, now=now):
        return Resolved(
            True, False, [f"operation {label(op)} changed just now; nothing changed. Look again."]
        )
    said = [f"operation {label(op)}: {op.status} -> {status} ({_effect(status, text)})"]
    note = None
    # A key settled as failed would only fail the task again at once.
    if task is not None and status != "failed":
        again, note = _run_task_again(store, task, now)
        said += again
    return Resolved(True, True, said, note)


def _may_still_act(op: OperationRecord, task: TaskRecord | None, now: datetime) -> str | None:
    """The warning before calling a key's function again while the attempt that
    claimed it may still wake and send its own request; None if there is no
    sign of that."""
    why = claimant_may_act(op, task, now, timedelta(seconds=DEFAULT_LEASE_SECONDS))
    if why is None:
        return None
    return (
        f"operation {label(op)} was claimed by task {op.task_id}, whose lease "
        f"lapsed before it recorded an outcome, and {why}. A paused process that wakes "
        "goes on from where it stopped: if its request had not left yet, it may send "
        "it now, and calling the function again as well would make the effect happen "
        "twice (unless the function calls ctx.before_send() right before sending, or "
        "the outside system dedupes the key). Look at the outside system again, and "
        "make sure that process is stopped for good, before you confirm. Nothing "
        "changed."
    )


def _run_task_again(
    store: AdminStore, task: TaskRecord, now: datetime
) -> tuple[list[str], str | None]:
    note = None
    if task.status == "cancelled":
        note = f"task {task.id} is cancelled; `cairn retry {task.id}` would run it again"
    if task.status != "failed" or not store.retry_task(task.id, now):
        return [], note
    if task.batch:
        picks_up = f"the next run_batch of batch {task.batch} (or app.run of this task)"
    else:
        picks_up = "the next app.run of this task"
    return [f"task {task.id}: failed -> pending; {picks_up} runs it again"], note
