"""The dashboard's pages of what operators did and what it changed: a rerun's
diff (``/diff``, one task or a batch, ``cairn diff``'s view) and the audit
trail (``/audit``, ``cairn audit``'s). Each reads through ``cairn.admin``."""

from __future__ import annotations

from cairn.admin.audit import audit_page
from cairn.admin.lineage import BatchDiff, batch_diff, task_diff
from cairn.ui.config import UIConfig
from cairn.ui.filters import Query
from cairn.ui.pages import message
from cairn.ui.render import Page


def diff(config: UIConfig, query: Query) -> Page:
    """``/diff?task=T`` or ``/diff?batch=B``: each entry a rerun changed, per
    task, and the totals (live: a rerun's tasks finish while it is open; the
    server answers 204 while nothing changed, but reads every rerun task's two
    runs for each poll, so a rerun of many thousands is better read with
    ``cairn diff``)."""
    task_id, batch = query.get("task", ""), query.get("batch", "")
    if task_id:
        record = config.store.get_task(task_id)
        if record is None:
            return message("Not found", f"No task {task_id}", 404)
        one = task_diff(config.store, record)
        found = BatchDiff(None, [] if one is None else [one])
        title = f"What the rerun of {task_id} changed"
    elif batch:
        found = batch_diff(config.store, batch)
        title = f"What the rerun of batch {batch} changed"
    else:
        return message("Bad query", "say which: /diff?task=T or /diff?batch=B", 400)
    cost = found.cost
    context = {
        "found": found,
        "tokens": cost.usage.input_tokens + cost.usage.output_tokens,
        "cost": f"{cost.cost:.4f}",
    }
    return Page(title, "diff.html", context, live=True)


def audit(config: UIConfig, query: Query) -> Page:
    """``/audit``: operator actions, newest first, paged (``older=ID``)."""
    older = query.get("older", "")
    try:
        page = audit_page(config.store, before=int(older) if older else None, size=50)
    except ValueError as exc:
        return message("Bad query", f"older: {exc}", 400, back="/audit")
    return Page("Audit trail", "audit.html", {"page": page}, live=True)
