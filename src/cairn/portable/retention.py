"""Retention: ``cairn prune`` deletes finished batches' records, ``cairn gc``
deletes the blobs no record refers to any more.

gc never deletes a blob younger than its grace period: a task writes its blob
before it commits the record that refers to it, so a fresh blob that no record
names yet may be one a running task is about to commit. Writing a blob that is
already stored refreshes its time, so the grace period covers re-use too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from cairn.blobs.protocol import BlobStore
from cairn.errors import TransferError
from cairn.portable._refs import referenced_blobs
from cairn.store.admin import admin
from cairn.store.protocol import Store

_FINISHED = frozenset({"completed", "failed", "cancelled"})
DEFAULT_GRACE = timedelta(hours=24)


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


@dataclass(frozen=True)
class GcReport:
    """What gc found and did."""

    referenced: int
    deleted: list[str]
    deleted_bytes: int
    young: int  # unreferenced, but inside the grace period: kept


def collect_garbage(
    store: Store,
    blobs: BlobStore,
    now: datetime,
    *,
    grace: timedelta = DEFAULT_GRACE,
    dry_run: bool = False,
) -> GcReport:
    """Delete the blobs of ``blobs`` that no record of ``store`` refers to and that
    are older than ``grace``."""
    target = admin(store, "cairn gc")
    # Listed before the references are read: a blob written after this listing is
    # not looked at, and one written before it is either referenced by the time
    # we read, or young enough to be spared.
    listed = list(blobs.blobs())
    referenced = referenced_blobs(target)
    deleted: list[str] = []
    size = young = 0
    for info in listed:
        if info.sha256 in referenced:
            continue
        if info.modified > now - grace:
            young += 1
            continue
        if not dry_run:
            blobs.delete(info.sha256)
        deleted.append(info.sha256)
        size += info.size
    return GcReport(len(referenced), deleted, size, young)
