"""Moving and keeping stores: backup, export/import of a batch, prune and gc."""

from __future__ import annotations

from cairn.portable.backup import BackupSummary, backup_sqlite
from cairn.portable.retention import DEFAULT_GRACE, GcReport, PrunePlan, collect_garbage, prune
from cairn.portable.transfer import VERSION, TransferSummary, export_batch, import_batch

__all__ = [
    "DEFAULT_GRACE",
    "VERSION",
    "BackupSummary",
    "GcReport",
    "PrunePlan",
    "TransferSummary",
    "backup_sqlite",
    "collect_garbage",
    "export_batch",
    "import_batch",
    "prune",
]
