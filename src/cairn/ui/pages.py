"""The dashboard's pages: server-rendered HTML, no JavaScript, every value escaped.

No inline ``style=`` attributes: the Content-Security-Policy allows only the one
``<style>`` element, by its hash (:data:`STYLE_SOURCE`).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Sequence
from datetime import datetime
from html import escape
from urllib.parse import urlencode

from cairn.admin.actions import CANCEL, RETRY
from cairn.observe.metrics import Metrics
from cairn.observe.stalls import Stall
from cairn.observe.text import metrics_lines
from cairn.store.records import TASK_STATUSES, BatchSummary, OperationRecord, StepRecord, TaskRecord

_STYLE = """
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
nav a{margin-right:1em}table{border-collapse:collapse;margin-top:.8em}
td,th{border-bottom:1px solid #ddd;padding:3px 8px;text-align:left}
progress{width:160px}
.failed{color:#b00}.completed{color:#070}.running{color:#06c}
form{display:inline}pre{white-space:pre-wrap}
"""
# The CSP source that lets exactly this stylesheet apply, and nothing injected.
_STYLE_DIGEST = hashlib.sha256(_STYLE.encode()).digest()
STYLE_SOURCE = f"'sha256-{base64.b64encode(_STYLE_DIGEST).decode()}'"


def link(path: str, label: str, **query: str | int | None) -> str:
    params = {k: v for k, v in query.items() if v is not None}
    href = path + ("?" + urlencode(params) if params else "")
    return f'<a href="{escape(href)}">{escape(label)}</a>'


def when(moment: datetime | None) -> str:
    return "-" if moment is None else escape(moment.strftime("%Y-%m-%d %H:%M:%S"))


def layout(title: str, body: str) -> str:
    nav = " ".join(
        link(path, label)
        for path, label in (
            ("/", "Batches"),
            ("/tasks", "Tasks"),
            ("/ops", "Operations"),
            ("/stalls", "Stalls"),
            ("/metrics", "Metrics"),
        )
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        # Without it a phone lays the page out 980 px wide and shrinks it.
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)} - cairn</title><style>{_STYLE}</style></head>"
        f"<body><nav>{nav}</nav><h1>{escape(title)}</h1>{body}</body></html>"
    )


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """``rows`` hold HTML already escaped by the caller."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def batches_page(summaries: list[BatchSummary]) -> str:
    rows = []
    for s in summaries:
        done = sum(s.counts.get(k, 0) for k in ("completed", "failed", "cancelled"))
        bar = f'<progress max="{max(s.total, 1)}" value="{done}"></progress> {done}/{s.total}'
        counts = [
            link("/tasks", str(s.counts.get(status, 0)), batch=s.name, status=status)
            for status in TASK_STATUSES
        ]
        rows.append([link("/tasks", s.name, batch=s.name), escape(s.task_name), bar, *counts])
    body = (
        table(["batch", "task", "progress", *TASK_STATUSES], rows) if rows else "<p>No batches.</p>"
    )
    return layout("Batches", body)


def tasks_page(
    tasks: list[tuple[int, TaskRecord]], status: str | None, batch: str | None, size: int
) -> str:
    filters = " ".join(
        link("/tasks", label or "all", status=label, batch=batch)
        for label in (None, *TASK_STATUSES)
    )
    rows = [
        [
            link("/task", t.id, id=t.id),
            escape(t.batch or "-"),
            f'<span class="{escape(t.status)}">{escape(t.status)}</span>',
            str(t.attempts),
            str(t.interruptions),
            when(t.started_at),
            when(t.finished_at),
        ]
        for _, t in tasks
    ]
    more = ""
    if len(tasks) == size:
        more = (
            "<p>"
            + link("/tasks", "Older", status=status, batch=batch, before=tasks[-1][0])
            + "</p>"
        )
    title = "Tasks" + (f" of {batch}" if batch else "") + (f" ({status})" if status else "")
    body = f"<p>Show: {filters}</p>" + (
        table(["task", "batch", "status", "attempts", "interruptions", "started", "finished"], rows)
        if rows
        else "<p>No tasks.</p>"
    )
    return layout(title, body + more)


def _button(task_id: str, action: str, csrf: str) -> str:
    return (
        f'<form method="post" action="/task/{action}">'
        f'<input type="hidden" name="id" value="{escape(task_id)}">'
        f'<input type="hidden" name="csrf" value="{escape(csrf)}">'
        f'<button type="submit" id="{action}">{action.capitalize()}</button></form>'
    )


def task_page(task: TaskRecord, steps: list[StepRecord], csrf: str) -> str:
    # A button shows where the action's own rule allows it (cairn.admin.actions).
    buttons = "".join(
        _button(task.id, action.name, csrf)
        for action in (RETRY, CANCEL)
        if task.status in action.sources
    )
    facts = table(
        ["status", "batch", "attempts", "interruptions", "owner", "started", "finished"],
        [
            [
                f'<span class="{escape(task.status)}" id="status">{escape(task.status)}</span>',
                escape(task.batch or "-"),
                str(task.attempts),
                str(task.interruptions),
                escape(task.owner or "-"),
                when(task.started_at),
                when(task.finished_at),
            ]
        ],
    )
    timeline = table(
        ["#", "kind", "name", "status", "calls", "started", "finished", "seconds", "error"],
        [
            [
                str(s.seq),
                escape(s.kind),
                escape(s.name),
                f'<span class="{escape(s.status)}">{escape(s.status)}</span>',
                str(s.attempts),
                when(s.started_at),
                when(s.finished_at),
                f"{(s.finished_at - s.started_at).total_seconds():.3f}",
                escape((s.error or "")[:160]),
            ]
            for s in sorted(steps, key=lambda s: s.seq)
        ],
    )
    error = f"<pre>{escape(task.error[:2000])}</pre>" if task.error else ""
    return layout(f"Task {task.id}", f"<p>{buttons}</p>{facts}{error}<h2>Steps</h2>{timeline}")


def ops_page(ops: list[OperationRecord]) -> str:
    rows = [
        [
            escape(o.scope),
            escape(o.key),
            escape(o.status),
            str(o.calls),
            link("/task", o.task_id, id=o.task_id),
            when(o.first_claimed_at),
            when(o.completed_at),
        ]
        for o in ops
    ]
    headers = ["scope", "key", "status", "calls", "task", "first claimed", "completed"]
    return layout("Operations", table(headers, rows) if rows else "<p>No operations.</p>")


def stalls_page(stalls: list[Stall], stall_after: float) -> str:
    rows = [
        [
            link("/task", s.task.task_id, id=s.task.task_id),
            escape(s.task.batch or "-"),
            when(s.task.checkpoint),
            f"{s.seconds:.0f}",
        ]
        for s in stalls
    ]
    head = f"<p>Running tasks with no checkpoint for over {stall_after:g} s.</p>"
    body = table(["task", "batch", "last checkpoint", "seconds"], rows) if rows else "<p>None.</p>"
    return layout("Stalls", head + body)


def metrics_page(metrics: Metrics) -> str:
    items = "".join(f"<li>{escape(line)}</li>" for line in metrics_lines(metrics))
    return layout("Metrics", f"<ul>{items}</ul>")


def message_page(title: str, text: str) -> str:
    return layout(title, f"<p>{escape(text)}</p><p>{link('/', 'Back to batches')}</p>")
