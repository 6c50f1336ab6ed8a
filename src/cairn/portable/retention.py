"""Retention by hand: ``cairn prune`` deletes finished batches' records (the
blobs no record refers to any more go at ``cairn gc``: ``cairn.blobs.gc``; a
policy that runs itself is ``cairn.retention``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from cairn.blobs.gc import DEFAULT_GRACE, GcReport, collect_garbage
from cairn.errors import TransferError
from cairn.store.admin import admin
from cairn.store.protocol import Store

__all__ = ["DEFAULT_GRACE", "GcReport", "PrunePlan", "collect_garbage", "prune"]

_FINISHED = frozenset({"completed", "failed", "cancelled"})


@dataclass(frozen=True)
class PrunePlan:
    """Which batches a prune deletes, and which it leaves and why."""

    pruned: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)  # pending or running tasks
    recent: list[str] = field(default_factory=list)  # finished on or after the date


def prune(
    store: Store,
    finished_before: datetime,
    *,
    batch: str | None = None,
    include_unfinished: bool = False,
    dry_run: bool = False,
) -> PrunePlan:
    """Delete every batch whose tasks all finished before ``finished_before``.

    A batch with pending or running tasks is kept unless ``include_unfinished``;
    naming such a batch without it is an error.
    """
    target = admin(store, "cairn prune")
    if batch is not None:
        if target.batch_task_name(batch) is None:
            raise TransferError(f"no batch named {batch!r} in {store.url}; see `cairn batches`")
        names = [batch]
    else:
        names = target.batch_names()
    plan = PrunePlan()
    for name in names:
        counts = target.batch_statuses(name)
        busy = sum(c.tasks for c in counts if c.status not in _FINISHED)
        if busy and not include_unfinished:
            if batch is not None:
                raise TransferError(
                    f"batch {name!r} has {busy} pending or running task(s); nothing was "
                    "deleted. Cancel them first, or pass --include-unfinished."
                )
            plan.unfinished.append(name)
            continue
        finished = [c.last_finished_at for c in counts if c.last_finished_at is not None]
        last = max(finished, default=None)
        if not busy and last is not None and last >= finished_before:
            plan.recent.append(name)
            continue
        plan.pruned.append(name)
    if not dry_run:
        for name in plan.pruned:
            target.delete_batch(name)
    return plan
