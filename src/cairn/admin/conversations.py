"""A task's conversations as an operator sees them: the active context, each
summary with the messages it covers, the archive on demand, and the tokens
and estimated cost of each recorded model call.

The reading is ``cairn.agent``'s (``archive``, ``costs``); this module picks
the conversation and puts the pieces together for the CLI and the dashboard.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cairn.agent.archive import (
    Blobs,
    ConversationView,
    StoredMessage,
    iter_history,
    load_conversation,
)
from cairn.agent.costs import CostLine, CostReport, cost_report, line_of
from cairn.agent.pricing import PriceTable, Usage
from cairn.errors import UnknownTask
from cairn.store import AdminStore
from cairn.store.reports import TaskQuery

__all__ = [
    "FIDELITY_TASK",
    "CallCost",
    "ConversationDetail",
    "SummaryCover",
    "call_costs",
    "conversation_calls",
    "conversation_detail",
    "conversation_name",
    "costs",
    "fidelity_task_id",
    "probe_costs",
]

# The task name of a `cairn fidelity` run, whose probes are its recorded calls.
FIDELITY_TASK = "cairn.fidelity"


def conversation_name(store: AdminStore, task_id: str, name: str | None) -> str:
    """The conversation to show: ``name``, else main, else the task's only one;
    ``UnknownTask`` saying which there are otherwise."""
    names = [c.conv for c in store.conversation_summaries(task_id)]
    if name is not None and name in names:
        return name
    if not names:
        raise UnknownTask(f"task {task_id!r} has no conversation", task_id=task_id)
    if name is None and "main" in names:
        return "main"
    if name is None and len(names) == 1:
        return names[0]
    listed = ", ".join(names)
    if name is None:
        raise UnknownTask(
            f"task {task_id!r} has conversations {listed}; pick one with --name", task_id=task_id
        )
    raise UnknownTask(
        f"task {task_id!r} has no conversation {name!r} (it has {listed})", task_id=task_id
    )


@dataclass(frozen=True, slots=True)
class SummaryCover:
    """A summary row and the message rows it stands for: ``first`` to
    ``covers_until``, both included (``first`` follows the summary before it)."""

    idx: int
    first: int
    covers_until: int
    tokens: int
    active: bool
    # Why the extractive fallback wrote it (cairn.agent.fallback), or None.
    fallback_reason: str | None = None


@dataclass(frozen=True, slots=True)
class CallCost:
    """One recorded model call (``llm``) or compaction (``conv``) of the task."""

    seq: int
    kind: str
    name: str
    line: CostLine


@dataclass(frozen=True, slots=True)
class ConversationDetail:
    """A conversation: its active context, every row when asked for
    (``archive``, else None), its summaries and what they cover, and its
    model calls (``conversation_calls``)."""

    view: ConversationView
    active: frozenset[int]
    archive: list[StoredMessage] | None
    summaries: list[SummaryCover]
    calls: list[CallCost] = field(default_factory=list)

    def shown(self) -> list[StoredMessage]:
        """The archive if it was read, else the active context."""
        return self.archive if self.archive is not None else self.view.active_rows()

    def stats(self) -> dict[str, object]:
        """The conversation's counts, labelled for display."""
        stats = self.view.stats
        return {
            "task": self.view.task_id,
            "conversation": self.view.name,
            "rows": stats.rows,
            "compactions": stats.compactions,
            "compactions short of the threshold": stats.short_compactions,
            "compactions by the fallback": stats.fallback_compactions,
            "archived messages": stats.archived_messages,
            "active tokens": stats.active_tokens,
            "tokens without compaction": stats.full_tokens,
            "token counts": self._counted_by(),
            "model calls": self._calls_line(),
        }

    def _counted_by(self) -> str:
        counted = self.view.counted_by
        if self.view.counter_recorded or not self.calls:
            return counted
        # Calls made outside ctx.llm (an Agents SDK session's) record no counter
        # in the conversation's rows; the provider counted each of them.
        n = len(self.calls)
        return f"the provider's at each of the {n} model calls; between them not recorded"

    def _calls_line(self) -> str:
        if not self.calls:
            return "none recorded in this task"
        usage = sum((c.line.usage for c in self.calls), Usage())
        cost = sum(c.line.cost for c in self.calls)
        return (
            f"{len(self.calls)} (input {usage.input_tokens:,} tokens, output "
            f"{usage.output_tokens:,}, estimated ${cost:.4f})"
        )


def _covers(rows: list[StoredMessage], active: frozenset[int]) -> list[SummaryCover]:
    covers = []
    first = 0
    for row in rows:
        # A carried row's positions are those of the conversation it came from.
        if row.kind != "summary" or row.covers_until is None or row.carried is not None:
            continue
        reason = (row.meta or {}).get("fallback_reason")
        cover = SummaryCover(
            row.idx, first, row.covers_until, row.tokens, row.idx in active, reason
        )
        covers.append(cover)
        first = row.covers_until + 1
    return covers


def conversation_detail(
    store: AdminStore,
    task_id: str,
    name: str | None = None,
    *,
    blobs: Blobs = None,
    archive: bool = False,
) -> ConversationDetail:
    """Conversation ``name`` of ``task_id`` (see ``conversation_name``), with
    every row ever appended if ``archive``. ``blobs`` reads messages kept in the
    blob store."""
    conv = conversation_name(store, task_id, name)
    view = load_conversation(store, task_id, conv, blobs=blobs)
    if view is None:  # its rows went between the two reads
        raise UnknownTask(
            f"task {task_id!r} has no conversation {conv!r} any more", task_id=task_id
        )
    active = frozenset(row.idx for row in view.active_rows())
    rows = list(iter_history(store, task_id, conv, blobs=blobs)) if archive else None
    summaries = _covers(rows if rows is not None else list(view.stored), active)
    calls = conversation_calls(store, task_id, conv)
    return ConversationDetail(view, active, rows, summaries, calls)


def conversation_calls(
    store: AdminStore, task_id: str, conv: str, *, prices: PriceTable | None = None
) -> list[CallCost]:
    """The model calls of conversation ``conv`` of ``task_id``, in order, priced:
    its ``ctx.llm`` calls, and the task's calls made outside any conversation's
    ``ctx.llm`` (an Agents SDK run's, whose session is a conversation of the
    task; ``ctx.llm_call``'s), which no row ties to one conversation. Another
    conversation's ``ctx.llm`` calls and the compactions are left out."""
    return [
        call
        for call in call_costs(store, task_id, prices=prices)
        if call.kind == "llm" and (call.name == f"llm {conv}" or not call.name.startswith("llm "))
    ]


def call_costs(
    store: AdminStore, task_id: str, *, prices: PriceTable | None = None
) -> list[CallCost]:
    """Each recorded model call and compaction of ``task_id``, in order, priced."""
    return [
        CallCost(call.seq, call.kind, call.name, line_of(call, prices))
        for call in store.recorded_calls(task_id=task_id)
    ]


def costs(
    store: AdminStore,
    *,
    batch: str | None = None,
    task_id: str | None = None,
    prices: PriceTable | None = None,
) -> CostReport:
    """Tokens and estimated cost per batch (neither given), or per task of
    ``batch``, or of the one task ``task_id``."""
    by_batch = batch is None and task_id is None
    return cost_report(store, batch=batch, task_id=task_id, by_batch=by_batch, prices=prices)


def fidelity_task_id(task_id: str, conv: str, stamp: str) -> str:
    """The id of the task that probes conversation ``conv`` of ``task_id`` (one
    ``cairn fidelity`` run, at time ``stamp``)."""
    return f"fidelity:{task_id}:{conv}:{stamp}"


def probe_costs(
    store: AdminStore, task_id: str, *, limit: int = 20, prices: PriceTable | None = None
) -> list[CostLine]:
    """What each ``cairn fidelity`` run on ``task_id`` cost, newest first (at most
    ``limit``): each its probe task's line of :func:`costs`, as ``cairn cost
    --task`` that id prints it."""
    convs = [c.conv for c in store.conversation_summaries(task_id)]
    prefixes = [fidelity_task_id(task_id, conv, "") for conv in convs]
    if not prefixes:
        return []
    # The name is searched in the tasks_by_name index (schema 4), so only the
    # store's probe tasks are read; the id's start then picks this task's. (An
    # id range would read fewer, but under a collation other than C the ids
    # that start so are not one range of the id index.)
    query = TaskQuery(name=FIDELITY_TASK, search=f"fidelity:{task_id}:", include_internal=True)
    lines = []
    # The newest first, without the total a listing page counts.
    for _, probe in store.find_tasks(query, below=None, above=None, size=limit):
        stamp = next((probe.id[len(p) :] for p in prefixes if probe.id.startswith(p)), None)
        if stamp is None or ":" in stamp:  # the probes of another task or conversation
            continue
        report = costs(store, task_id=probe.id, prices=prices)
        if report.lines:
            lines.append(report.lines[0])
    return lines
