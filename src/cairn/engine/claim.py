"""Claiming: the one path by which this process takes a task to run.

Every runner claims here: ``engine.run`` (one task, by id), ``run_batch`` and
``cairn worker`` (the next task of a batch, or of any batch), and ``ctx.join``
(a child nobody has started). So the rules are written once:

1. **Orphans first.** A running task whose owner process is gone (on this host),
   whose lease has lapsed, or that an interrupted call of this very process
   left behind, is claimed before any pending task, at any queue depth: its
   work was under way, and someone may be waiting for it.
2. **A live owner is left alone** until its lease has lapsed: expired, and then
   a grace of a heartbeat and a reconnect more (``ownership.takeover_grace``),
   so an owner cut off by a store outage shorter than its lease finds its task
   still its own when the store returns. The claim statement checks the lease
   again, so an owner that renews first keeps its task.
3. **Then pending tasks**, oldest first, through an index of pending rows only,
   and waiting tasks whose timeout has passed.

A claim is a compare-and-set on the fence. A task claimed here is marked active
in this process (keyed by store and task id) and its lease is held by the app's
keeper from the moment the claim was sent, until ``release``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from cairn.engine.owners import (
    TakeoverReason,
    claim_lock,
    is_active_here,
    mark_active,
    mark_inactive,
    owner_is_gone,
    runs_here_at,
    takeover_reason,
)
from cairn.store.records import TaskRecord

if TYPE_CHECKING:
    from cairn.engine.config import EngineConfig

log = logging.getLogger("cairn")

WAIT: Literal["wait"] = "wait"
# Orphans looked at per look: more are found at the next one.
_ORPHANS_PER_LOOK = 16
# Our own running tasks are few (one per thread); read them all.
_OWN_TASKS_LIMIT = 100_000


def reason_to_take(engine: EngineConfig, task: TaskRecord, now: datetime) -> TakeoverReason | None:
    """Why this process may take the running ``task`` over now, or None."""
    return takeover_reason(
        task, me=engine.owner, store=engine.store.identity, now=now, grace=engine.takeover_grace
    )


def claimable(engine: EngineConfig, task: TaskRecord, now: datetime) -> bool:
    """True if the rules let this process claim ``task`` (as last read) now."""
    if task.status == "pending":
        return True
    if task.status == "waiting":
        return task.wake_at is not None and task.wake_at <= now
    if task.status == "running":
        return reason_to_take(engine, task, now) is not None
    return False


def claim_task(engine: EngineConfig, task: TaskRecord) -> TaskRecord | None:
    """Take ``task`` (as last read) if the rules allow and nobody moved first;
    the claimed record, or None."""
    with claim_lock:
        now = engine.clock.now()
        reason = None
        if task.status == "running":
            reason = reason_to_take(engine, task, now)
            if reason is None:
                return None
        return _take(engine, task, reason, now)


def release(engine: EngineConfig, task_id: str) -> None:
    """This process stops running ``task_id`` (it ended, or was handed back)."""
    mark_inactive(engine.store.identity, task_id)
    engine.leases.drop(task_id)


def _take(
    engine: EngineConfig, task: TaskRecord, reason: TakeoverReason | None, now: datetime
) -> TaskRecord | None:
    """The claim statement for one task; on success the task is ours here."""
    sent_at, lease_until = engine.leases.stamp()
    claimed = engine.store.claim_task(
        task.id,
        task.fence,
        engine.owner,
        lease_until,
        now,
        owner_gone=reason in ("gone", "interrupted"),
        lapsed_before=now - engine.takeover_grace,
        version=engine.version,
    )
    if claimed is None or _hold(engine, claimed, sent_at, lease_until) is None:
        return None
    if reason is not None:
        _log_takeover(task, reason, now)
    return claimed


def _hold(
    engine: EngineConfig, claimed: TaskRecord, sent_at: float, lease_until: datetime
) -> TaskRecord | None:
    """Mark ``claimed`` ours here and hold its lease; None (not ours to run) if
    a thread of this process runs it already under that fence: a claim whose
    answer was lost recognises its own row by owner and stamp
    (``SQLCore._write_once``), and a task of ours that happened to share that
    stamp must never run twice under one fence."""
    if runs_here_at(engine.store.identity, claimed.id, claimed.fence):
        return None
    mark_active(engine.store.identity, claimed.id, claimed.fence)
    engine.leases.hold(claimed.id, claimed.fence, sent_at, lease_until)
    return claimed


def _log_takeover(task: TaskRecord, reason: TakeoverReason, now: datetime) -> None:
    if reason == "gone":
        log.info(
            "cairn: resuming task %s (its owner %s is gone: no such process on this host)",
            task.id,
            task.owner,
        )
    elif reason == "interrupted":
        log.info("cairn: taking task %s back (an interrupted call here left it running)", task.id)
    else:
        expired = task.lease_expires_at
        ago = 0.0 if expired is None else (now - expired).total_seconds()
        log.info(
            "cairn: taking over task %s (its owner %s has not renewed its lease, which "
            "expired %.1fs ago)",
            task.id,
            task.owner,
            ago,
        )


class Claimer:
    """Finds and claims the next task this process may run: of one batch, or
    (``batch=None``) of any batch whose task function is one of ``names``."""

    def __init__(
        self,
        engine: EngineConfig,
        batch: str | None,
        names: Sequence[str] | None = None,
        versions: Sequence[str] | None = None,
    ) -> None:
        self._engine = engine
        self._batch = batch
        self._names = tuple(names) if names is not None else None
        # Only tasks enqueued under one of these versions (or under none); None: any.
        self._versions = tuple(versions) if versions is not None else None
        # When (the app clock's monotonic time) to look for orphans again while
        # pending work remains; at once when nothing is pending.
        self._next_orphan_look = float("-inf")
        # Fair claims between batches (docs/workers.md): the batch this process
        # claimed from last, "" at the start of a round; None when claiming from
        # one batch (nothing to be fair between).
        self._after_batch: str | None = "" if batch is None else None

    def next(self) -> TaskRecord | Literal["wait"] | None:
        """A claimed task; ``WAIT`` if tasks still run elsewhere that may become
        ours (or finish); None when nothing is left for this process."""
        with claim_lock:
            engine = self._engine
            elsewhere = None
            if engine.clock.monotonic() >= self._next_orphan_look:
                orphan, elsewhere = self._orphan()
                if orphan is not None:
                    return orphan
            pending = self._pending()
            if pending is not None:
                return pending
            if not elsewhere:
                # Nothing pending: orphans are all that is left to claim. A look
                # taken before that claim is stale: another process may have
                # claimed the last pending task in between, so look again.
                orphan, elsewhere = self._orphan()
                if orphan is not None:
                    return orphan
            if not elsewhere:
                # Before saying "nothing left": a claim of another process not yet
                # committed hides its task from both looks (SKIP LOCKED passes it,
                # and it is not running yet), but it is still pending.
                elsewhere = self._has_pending()
            return WAIT if elsewhere else None

    def _has_pending(self) -> bool:
        return self._engine.store.has_pending(self._batch, self._names, versions=self._versions)

    def _pending(self) -> TaskRecord | None:
        engine = self._engine
        sent_at, lease_until = engine.leases.stamp()
        claimed = engine.store.claim_next_pending(
            self._batch,
            engine.owner,
            lease_until,
            engine.clock.now(),
            names=self._names,
            versions=self._versions,
            version=engine.version,
            after_batch=self._after_batch,
        )
        if claimed is None:
            return None
        self._round_on(claimed.batch)
        return _hold(engine, claimed, sent_at, lease_until)

    def _round_on(self, batch: str | None) -> None:
        """After a claim from ``batch``: the next fair claim looks after it, or,
        when the claim was not the next batch's (the round's last turn, the
        oldest task of any batch), starts the round again from the first batch."""
        after = self._after_batch
        if after is not None:
            self._after_batch = batch if batch is not None and batch > after else ""

    def _orphan(self) -> tuple[TaskRecord | None, bool]:
        """Claim a running task whose owner is gone or whose lease has lapsed; and
        whether other owners run tasks (that may yet become ours, or finish).

        A look that finds one is due again at once (a dead worker leaves several);
        a look that finds none waits ``poll_interval`` while pending work remains."""
        engine = self._engine
        now = engine.clock.now()
        candidates, elsewhere = self._orphan_candidates(now)
        for task in candidates:
            reason = reason_to_take(engine, task, now)
            if reason is not None:
                claimed = _take(engine, task, reason, now)
                if claimed is not None:
                    return claimed, elsewhere
        self._next_orphan_look = engine.clock.monotonic() + engine.poll_interval
        return None, elsewhere

    def _orphan_candidates(self, now: datetime) -> tuple[list[TaskRecord], bool]:
        """Running tasks of owners known gone, ours left behind, then lapsed leases;
        and whether any owner but this process runs tasks at all."""
        engine, store = self._engine, self._engine.store
        found: list[TaskRecord] = []
        batch, names, versions = self._batch, self._names, self._versions
        owners = store.running_owners(batch, names, versions=versions)
        for owner in owners:
            if owner == engine.owner:
                mine = store.owned_running(owner, batch, names, _OWN_TASKS_LIMIT, versions=versions)
                found += [t for t in mine if not is_active_here(store.identity, t.id)]
            elif owner_is_gone(owner):
                found += store.owned_running(
                    owner, batch, names, _ORPHANS_PER_LOOK, versions=versions
                )
        elsewhere = any(owner != engine.owner for owner in owners)
        if elsewhere:  # a lease of our own is never ours to take over
            lapsed_before = now - engine.takeover_grace
            found += store.expired_running(
                batch, names, lapsed_before, _ORPHANS_PER_LOOK, versions=versions
            )
        return found, elsewhere
