"""The confirmation pages of the dashboard's actions that touch more than one
task or undo work: cancel a task (and the tasks it spawned), rerun from a
step (one task, or every task a filter picks), retry or cancel every task a
filter picks. Each says how many tasks it touches, before anything changes,
and carries the form that does it (with the form secret). A GET: nothing
changes here; the button posts to the action (``cairn.ui.actions``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cairn.admin.actions import CANCEL, unfinished_below
from cairn.admin.bulk import describe_query, selection
from cairn.admin.reruns import ForkPoint, RerunPlan, plan_rerun, rerun_candidates
from cairn.agent.costs import CostLine
from cairn.clock import to_iso
from cairn.store.reports import TaskQuery
from cairn.ui.config import UIConfig
from cairn.ui.filters import BULK_ACTIONS, FILTER_FIELDS, BadQuery, Query, task_query
from cairn.ui.pages import message
from cairn.ui.render import Page

# A rerun's confirmation lists this many tasks, then counts the rest.
LISTED = 50


@dataclass
class Confirmation:
    """What a confirmation page shows: sentences, the tasks it touches, a
    rerun's plan; and the form that does it (where it posts, its fields)."""

    title: str
    lines: list[str]
    post_to: str
    fields: dict[str, str]
    button: str
    count: int
    tasks: list[str] = field(default_factory=list)
    plan: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    keep_children: bool = False
    back: str = "/tasks"


def _page(config: UIConfig, found: Confirmation) -> Page:
    return Page(found.title, "confirm.html", {"c": found, "csrf": config.csrf})


def _fields(query: TaskQuery, raw: Query) -> dict[str, str]:
    """The filter as hidden fields, times resolved, so the POST picks what
    the page counted (a relative "24h" would move on meanwhile)."""
    fields = {k: raw[k] for k in FILTER_FIELDS if raw.get(k)}
    for name, moment in (("since", query.since), ("until", query.until)):
        if moment is not None:
            fields[name] = to_iso(moment)
    return fields


def _cost_text(cost: CostLine) -> str:
    tokens = cost.usage.input_tokens + cost.usage.output_tokens
    return f"{cost.calls} model call(s), {tokens} tokens, est. ${cost.cost:.4f}"


def _plan_rows(plan: RerunPlan) -> list[dict[str, Any]]:
    rows = []
    for task in plan.runnable[:LISTED]:
        cost = task.cost or CostLine(task.task.id)
        rows.append(
            {
                "id": task.task.id,
                "from": f"{task.seq} {task.step}",
                "again": ", ".join(task.steps),
                "calls": cost.calls,
                "tokens": cost.usage.input_tokens + cost.usage.output_tokens,
                "cost": f"{cost.cost:.4f}",
                "kept": ", ".join(task.kept_operations),
            }
        )
    return rows


def _rerun_lines(plan: RerunPlan) -> list[str]:
    runnable = plan.runnable
    lines = [
        f"{len(runnable)} task(s) will be rerun {plan.point}: every entry before it is "
        "kept, the rest runs again with the current code when a worker or run_batch "
        "takes them.",
        f"As recorded, the entries that run again cost {_cost_text(plan.cost)}.",
    ]
    kept = sum(len(task.kept_operations) for task in runnable)
    if kept:
        lines.append(
            f"{kept} operation(s) after the fork point have keys that name their effect "
            "for good: the new runs find them done and do not call them again (an "
            "effect keyed with ctx.run_key is made again)."
        )
    if len(runnable) > LISTED:
        lines.append(f"The first {LISTED} are listed.")
    return lines


def _point(raw: Query) -> ForkPoint:
    step = raw.get("from", "").strip()
    seq = raw.get("seq", "").strip()
    try:
        return ForkPoint(step=step or None, seq=int(seq) if seq else None)
    except ValueError as exc:
        raise BadQuery(f"rerun from where? Give a step name or a position ({exc})") from None


def _rerun_task(config: UIConfig, raw: Query) -> Page:
    task_id = raw.get("id", "")
    record = config.store.get_task(task_id)
    if record is None:
        return message("Not found", f"No task {task_id}", 404)
    point = _point(raw)
    plan = plan_rerun(config.store, [record], point)
    fields = {"id": task_id, "from": point.step or "", "seq": str(point.seq or "")}
    found = Confirmation(
        f"Rerun task {task_id} {point}?", _rerun_lines(plan), "/task/rerun", fields,
        "Rerun", len(plan.runnable), plan=_plan_rows(plan),
        skipped=[t.skipped or "" for t in plan.skipped], back=f"/task?id={task_id}",
    )  # fmt: skip
    return _page(config, found)


def _rerun_filter(config: UIConfig, raw: Query, query: TaskQuery) -> Page:
    point = _point(raw)
    plan = plan_rerun(config.store, rerun_candidates(config.store, query), point)
    fields = {**_fields(query, raw), "action": "rerun", "from": point.step or ""}
    fields["seq"] = str(point.seq or "")
    described = describe_query(query)
    lines = [f"Tasks picked: {described}" + ("" if query.status else " (completed or failed)")]
    found = Confirmation(
        f"Rerun {len(plan.runnable)} task(s) {point}?", lines + _rerun_lines(plan), "/bulk",
        fields, f"Rerun {len(plan.runnable)} task(s)", len(plan.runnable),
        plan=_plan_rows(plan), skipped=[t.skipped or "" for t in plan.skipped],
    )  # fmt: skip
    return _page(config, found)


def _bulk(config: UIConfig, raw: Query, query: TaskQuery, verb: str) -> Page:
    action = BULK_ACTIONS[verb]
    picked = selection(config.store, action, query)
    lines = [
        f"Tasks picked: {picked.described}. {picked.count} of them are "
        f"{action.allowed()} and will be {action.done}.",
    ]
    if action is CANCEL:
        lines.append("Each one's spawned tasks that are not finished are cancelled with it.")
    if picked.count > len(picked.sample):
        lines.append(f"The first {len(picked.sample)} are listed.")
    found = Confirmation(
        f"{verb.capitalize()} {picked.count} task(s)?", lines, "/bulk",
        {**_fields(query, raw), "action": verb}, f"{verb.capitalize()} {picked.count} task(s)",
        picked.count, tasks=[t.id for t in picked.sample],
    )  # fmt: skip
    return _page(config, found)


def _cancel_task(config: UIConfig, raw: Query) -> Page:
    task_id = raw.get("id", "")
    record = config.store.get_task(task_id)
    if record is None:
        return message("Not found", f"No task {task_id}", 404)
    below = unfinished_below(config.store, task_id)
    lines = [f"Task {task_id} is {record.status}."]
    if record.status not in CANCEL.sources:
        lines.append(f"Only {CANCEL.allowed()} tasks can be cancelled; nothing would change.")
    if below:
        lines.append(
            f"{len(below)} unfinished task(s) it spawned are cancelled with it, unless you "
            "keep them."
        )
    found = Confirmation(
        f"Cancel task {task_id}?", lines, "/task/cancel", {"id": task_id}, "Cancel",
        1 + len(below), tasks=below[:LISTED], keep_children=bool(below),
        back=f"/task?id={task_id}",
    )  # fmt: skip
    return _page(config, found)


def confirm(config: UIConfig, raw: Query) -> Page:
    """``/confirm?action=cancel|rerun|retry&...``: one task (``id``) or every task
    the filter fields pick; a rerun with ``from`` (a step name) or ``seq``."""
    verb = raw.get("action", "")
    try:
        if verb == "cancel" and raw.get("id"):
            return _cancel_task(config, raw)
        if verb == "rerun" and raw.get("id"):
            return _rerun_task(config, raw)
        query = task_query(raw, config.now())
        if verb == "rerun":
            return _rerun_filter(config, raw, query)
        if verb in BULK_ACTIONS:
            return _bulk(config, raw, query, verb)
    except (BadQuery, ValueError) as exc:
        return message("Bad query", str(exc), 400, back="/tasks")
    return message("Bad query", f"no such action {verb!r}: retry, cancel or rerun", 400)
