"""The task listing's filters, read from a query string (or a form): what
``/tasks`` shows, and what a bulk action (``cairn.ui.confirm``,
``cairn.ui.actions``) acts on. The same ``TaskQuery`` as ``cairn tasks``."""

from __future__ import annotations

from datetime import datetime

from cairn.admin.actions import CANCEL, RETRY
from cairn.observe._time import parse_moment
from cairn.store.records import TASK_STATUSES
from cairn.store.reports import TaskQuery

Query = dict[str, str]
# The filter fields a bulk action carries from the task list to its POST.
FILTER_FIELDS = ("q", "status", "batch", "name", "since", "until", "internal", "error")
BULK_ACTIONS = {"retry": RETRY, "cancel": CANCEL}


class BadQuery(ValueError):
    """A query parameter the page cannot use; its text says which and why."""


def moment(query: Query, field: str, now: datetime) -> datetime | None:
    text = query.get(field, "").strip()
    if not text:
        return None
    try:
        return parse_moment(text, now)
    except ValueError as exc:
        raise BadQuery(f"{field}: {exc}") from None


def task_query(query: Query, now: datetime) -> TaskQuery:
    """The listing filters of a query string: status, batch, task name, created
    since/until (a time, or a duration ago like ``2h``), search text, internal,
    error type (a batch's failure group)."""
    status = query.get("status") or None
    if status is not None and status not in TASK_STATUSES:
        raise BadQuery(f"status {status!r} is not one of {', '.join(TASK_STATUSES)}")
    return TaskQuery(
        status=status,
        batch=query.get("batch") or None,
        name=query.get("name") or None,
        since=moment(query, "since", now),
        until=moment(query, "until", now),
        search=(query.get("q") or "").strip() or None,
        include_internal=query.get("internal") == "1",
        error_type=query.get("error") or None,
    )
