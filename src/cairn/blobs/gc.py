"""``cairn gc``: delete the blobs no record of a store refers to any more.

gc never deletes a blob younger than its grace period: a task writes its blob
before it commits the record that refers to it, so a fresh blob that no record
names yet may be one a running task is about to commit. Writing a blob that is
already stored refreshes its time, so the grace period covers re-use too.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from cairn.blobs.in_store import referenced_blobs
from cairn.blobs.protocol import BlobStore
from cairn.store.admin import admin
from cairn.store.protocol import Store

DEFAULT_GRACE = timedelta(hours=24)


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
