"""The dashboard's pages: each reads through ``cairn.admin`` and names the
template that shows it. No SQL and no store of a kind here: what a page shows
is what the CLI would say, read by the same functions.

Each builder takes the config and the query (one value per name) and returns a
:class:`~cairn.ui.render.Page`; a bad query is a 400 page saying what was wrong.
"""

from __future__ import annotations

from dataclasses import replace

from cairn.admin.actions import CANCEL, RETRY
from cairn.admin.batches import batch_view
from cairn.admin.budgets import budget_line, budget_scope, budget_view
from cairn.admin.charts import hourly
from cairn.admin.conversations import call_costs, conversation_detail, costs, probe_costs
from cairn.admin.lineage import lineage
from cairn.admin.listing import BadCursor, batch_page, task_page
from cairn.admin.logs import task_logs
from cairn.admin.metrics import metrics_summary
from cairn.admin.operations import operations as list_operations
from cairn.admin.reruns import RERUNNABLE
from cairn.admin.retention import retention_lines
from cairn.admin.triage import ErrorGroup, error_groups, triage_rows
from cairn.admin.views import task_view
from cairn.agent.archive import StoredMessage
from cairn.agent.costs import COST_COLUMNS, CostLine
from cairn.agent.messages import text_of
from cairn.errors import UnknownTask
from cairn.observe.stalls import stalls_in
from cairn.observe.text import metrics_lines
from cairn.store.records import TASK_STATUSES
from cairn.store.reports import TaskQuery, Window
from cairn.ui.actions import RESOLVE_STATUSES
from cairn.ui.charts import bar_chart, cost_chart
from cairn.ui.config import UIConfig
from cairn.ui.filters import BadQuery, Query, moment, task_query
from cairn.ui.gantt import gantt
from cairn.ui.render import Page, href

OPS_LIMIT = 200
# The metrics page lists this many batches a page, newest first.
TOP_BATCHES = 10
# A batch page lists the cost of this many of its tasks (``cairn cost --batch``
# has them all).
COST_TASKS = 20


def message(title: str, text: str, status: int, back: str = "/") -> Page:
    return Page(title, "message.html", {"text": text, "back": back}, status=status)


def _cursors(query: Query) -> dict[str, str | None]:
    return {"older_than": query.get("older") or None, "newer_than": query.get("newer") or None}


def batches(config: UIConfig, query: Query) -> Page:
    search = query.get("q") or None
    try:
        found = batch_page(config.store, search=search, size=config.page_size, **_cursors(query))
    except (BadCursor, ValueError) as exc:
        return message("Bad page", str(exc), 400)
    shown = {"page": found, "q": search or "", "retention": retention_lines(config.store)}
    return Page("Batches", "batches.html", shown, live=True)


def _cost(line: CostLine, label: str) -> dict[str, object]:
    """A cost line as the page shows it: ``cairn cost``'s own cells
    (``CostLine.cells``), under ``label``."""
    cells = replace(line, label=label).cells()
    return {
        "columns": COST_COLUMNS,
        "cells": cells,
        "by_column": dict(zip(COST_COLUMNS, cells, strict=True)),
        "unpriced": line.unpriced_calls,
        "estimated": line.estimated_note(),
    }


def batch(config: UIConfig, query: Query) -> Page:
    name = query.get("name", "")
    view = batch_view(config.store, name, config.now())
    if view is None:
        return message("Not found", f"No batch {name!r} in this store", 404)

    def cost() -> dict[str, object]:
        # What `cairn cost` says of the batch (its line), and `cairn cost --batch` of its tasks.
        report = costs(config.store, batch=name)
        budget = budget_view(config.store, budget_scope(name))
        return {
            "name": name,
            "cost": _cost(report.total, name) if report.lines else None,
            "task_costs": [line.cells() for line in report.lines[:COST_TASKS]],
            "more_costs": max(0, len(report.lines) - COST_TASKS),
            # What `cairn cost` says of the batch's budget, and who is parked on it.
            "budget": None if budget is None else budget_line(budget),
            "parked": [] if budget is None else list(budget.parked[:COST_TASKS]),
            "csrf": config.csrf,
        }

    context = {"view": view}
    return Page(
        f"Batch {name}", "batch.html", context, live=True, tail="batch_cost.html", tail_context=cost
    )


def tasks(config: UIConfig, query: Query) -> Page:
    try:
        filters = task_query(query, config.now())
        found = task_page(config.store, filters, size=config.page_size, **_cursors(query))
    except (BadQuery, BadCursor, ValueError) as exc:
        return message("Bad query", str(exc), 400, back="/tasks")
    kept = {k: v for k, v in query.items() if k not in ("older", "newer") and v}
    title = "Tasks" + (f" of {filters.batch}" if filters.batch else "")
    title += f" ({filters.status})" if filters.status else ""
    now = config.now()
    context = {
        "page": found,
        "rows": triage_rows(config.store, found.rows, now),
        "groups": _groups(config, filters),
        "now": now,
        "filters": kept,
        "statuses": TASK_STATUSES,
    }
    return Page(title, "tasks.html", context, live=True)


def _groups(config: UIConfig, filters: TaskQuery) -> list[ErrorGroup]:
    """The failed tasks' error groups, where an index bounds them (the failed
    tasks, or a batch's): a search alone would count them with a second pass
    over every task, on every poll."""
    if filters.status not in (None, "failed"):
        return []
    if filters.status is None and filters.batch is None:
        return []
    return error_groups(config.store, replace(filters, error_type=None))


def task(config: UIConfig, query: Query) -> Page:
    task_id = query.get("id", "")
    view = task_view(config.store, task_id)
    if view is None:
        return message("Not found", f"No task {task_id}", 404)
    now = config.now()
    ops = list_operations(config.store, task_id=task_id, limit=OPS_LIMIT, now=now)
    # A button shows where the action's own rule allows it (cairn.admin.actions).
    buttons = [a.name for a in (RETRY, CANCEL) if view.task.status in a.sources]
    context = {
        "view": view,
        "now": now,
        "logs": task_logs(config.store, task_id),
        "csrf": config.csrf,
        "buttons": buttons,
        "runs": lineage(config.store, view.task) if view.task.run > 1 else [],
        # A finished task can be rerun from any of its entries (cairn.admin.reruns).
        "rerun_from": view.steps if view.task.status in RERUNNABLE else [],
        "can_signal": view.task.status in ("pending", "running", "waiting"),
        "gantt": gantt(view.steps),
        "ops": ops,
        "resolve_statuses": RESOLVE_STATUSES,
    }

    def cost() -> dict[str, object]:
        report = costs(config.store, task_id=task_id)  # what `cairn cost --task` says
        return {
            "cost": _cost(report.total, task_id) if report.lines else None,
            # Each `cairn fidelity` run on this task: its probe task's `cairn cost --task` line.
            "probe_costs": [line.cells() for line in probe_costs(config.store, task_id)],
            "cost_columns": COST_COLUMNS,
            # Its streamed model text, live from the token lane (cairn.observe.lane).
            "tail_url": href("/task/tail", id=task_id) if view.task.status == "running" else None,
        }

    return Page(
        f"Task {task_id}", "task.html", context, live=True, tail="task_cost.html", tail_context=cost
    )


def operations(config: UIConfig, query: Query) -> Page:
    doubt = query.get("doubt") == "1"
    ops = list_operations(config.store, only_in_doubt=doubt, limit=OPS_LIMIT, now=config.now())
    context = {
        "ops": ops,
        "doubt": doubt,
        "limit": OPS_LIMIT,
        "csrf": config.csrf,
        "resolve_statuses": RESOLVE_STATUSES,
    }
    return Page("Operations", "ops.html", context, live=True)


def _message(row: StoredMessage, active: frozenset[int]) -> dict[str, object]:
    message = row.message
    return {
        "idx": row.idx,
        "kind": row.kind,
        "role": message.get("role", "?"),
        "text": text_of(message),
        "tokens": row.tokens,
        # A row a handoff carried has the earlier conversation's idx.
        "active": row.carried is None and row.idx in active,
        "carried": None if row.carried is None else row.carried.get("task_id"),
    }


def conversation(config: UIConfig, query: Query) -> Page:
    task_id = query.get("task", "")
    archive = query.get("archive") == "1"
    try:
        detail = conversation_detail(
            config.store, task_id, query.get("name") or None, archive=archive
        )
    except UnknownTask as exc:
        return message("Not found", str(exc), 404, back="/tasks")
    context = {
        "detail": detail,
        "messages": [_message(row, detail.active) for row in detail.shown()],
        "archive": archive,
        "calls": call_costs(config.store, task_id),
        "name": detail.view.name,
    }
    return Page(f"Conversation {detail.view.name} of {task_id}", "conversation.html", context)


def stalls(config: UIConfig, query: Query) -> Page:
    found = stalls_in(config.store, config.now(), config.stall_after)
    context = {"stalls": found, "stall_after": config.stall_after, "now": config.now()}
    return Page("Stalls", "stalls.html", context, live=True)


def metrics(config: UIConfig, query: Query) -> Page:
    """Bounded at any store size: the hourly chart (from kept sums), a page of
    the newest batches, the stalls; the durability metrics (a pass over what
    they cover) only for a chosen batch or a time window."""
    now = config.now()
    try:
        since = moment(query, "since", now)
        window = Window(since=since, batch=query.get("batch") or None)
        top = batch_page(config.store, size=TOP_BATCHES, **_cursors(query))
    except (BadQuery, BadCursor, ValueError) as exc:
        return message("Bad query", str(exc), 400, back="/metrics")
    hours = hourly(config.store, now)
    context: dict[str, object] = {
        "hours": hours,
        "chart": bar_chart(hours),
        "cost_chart": cost_chart(hours),
        "finished": sum(h.finished for h in hours),
        "failed": sum(h.failed for h in hours),
        "cost": sum(h.cost for h in hours),
        "top": top,
        "lines": [],
        "steps": [],
        "chosen": window.batch is not None or window.since is not None,
        "stalls": stalls_in(config.store, now, config.stall_after),
        "since": query.get("since", ""),
        "batch": query.get("batch", ""),
    }
    if context["chosen"]:
        summary = metrics_summary(config.store, window, now=now, stall_after=config.stall_after)
        # One line per step *name* would be 300 lines for numbered steps: the steps
        # are shown grouped by name template in a table instead.
        context["lines"] = metrics_lines(replace(summary.metrics, steps=[]))
        context["steps"] = summary.metrics.steps
    return Page("Metrics", "metrics.html", context)
