"""The retention policy a store's workers apply, as the dashboard shows it."""

from __future__ import annotations

from cairn.retention import describe_policies, next_run, noted_policies
from cairn.store.admin import admin
from cairn.store.protocol import Store


def retention_lines(store: Store) -> list[str]:
    """The noted policies and the next run, a line each (none if no policy)."""
    target = admin(store, "the retention view")
    policies = noted_policies(target)
    return describe_policies(policies, next_run(target)) if policies else []
