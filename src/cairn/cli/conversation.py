"""``cairn conversation TASK``: a task's conversation, active context or all of it.

By default the active context (system prompt, latest summary, the messages
after it); ``--all`` adds the archived head, every row ever appended, after
the rows a handoff carried, if any (state ``carried from TASK``).
``--jsonl`` exports the rows as JSON Lines; ``--handoff`` prints the handoff
document a Day 2 task can start from (``--archive``: with every row inline).
The table ends with the conversation's model calls (``conversation_calls``:
its ``ctx.llm`` calls, and the task's Agents SDK calls), the latest ten unless
``--calls``.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.text import Text

from cairn.admin.conversations import (
    CallCost,
    ConversationDetail,
    call_costs,
    conversation_detail,
)
from cairn.agent.archive import StoredMessage, export_jsonl, iter_history
from cairn.agent.handoff import archive_part
from cairn.agent.message_blobs import MessageReader
from cairn.agent.messages import text_of
from cairn.clock import SystemClock

from ._blobs_option import BlobsOption, blobs_for
from ._consoles import stdout_console
from ._field_text import clip, short_time
from ._json_output import JsonOption, print_json
from ._store_option import DEFAULT_URL, StoreOption, opened_store
from ._tables import RowTable, key_values, print_table
from .show import TaskArgument, get_task_or_fail

NameOption = Annotated[
    str | None,
    typer.Option("--name", "-n", help="The conversation (default: main, or the only one)."),
]
_COLUMNS = ("idx", "state", "role", "tokens", "created", "text")
_TEXT_WIDTH = 120
_CALLS = 10
_CALL_COLUMNS = ("seq", "call", "input", "output", "cost")


def conversation_command(
    task_id: TaskArgument,
    name: NameOption = None,
    show_all: Annotated[
        bool,
        typer.Option(
            "--all", help="Every row, the archived head and a handoff's carried rows included."
        ),
    ] = False,
    jsonl: Annotated[bool, typer.Option("--jsonl", help="Export rows as JSON Lines.")] = False,
    handoff: Annotated[
        bool, typer.Option("--handoff", help="Print the handoff document (JSON).")
    ] = False,
    archive: Annotated[
        bool, typer.Option("--archive", help="With --handoff: carry every row inline.")
    ] = False,
    all_calls: Annotated[
        bool,
        typer.Option("--calls", help=f"List every model call (default: the latest {_CALLS})."),
    ] = False,
    store: StoreOption = DEFAULT_URL,
    blobs: BlobsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show a task's conversation: its active context, or with --all every message."""
    with opened_store(store) as opened:
        get_task_or_fail(opened, task_id)
        # Messages above the inline limit are read from the blob store.
        reader = MessageReader(blobs_for(store, blobs), store_url=opened.url)
        detail = conversation_detail(opened, task_id, name, blobs=reader, archive=show_all)
        calls = call_costs(opened, task_id) if as_json else []
        carried = None
        if handoff and archive:
            everything = iter_history(opened, task_id, detail.view.name, blobs=reader)
            carried = archive_part([row.to_json() for row in everything], "inline", None)
    if handoff:
        print_json(detail.view.handoff(now=SystemClock().now(), archive=carried))
        return
    shown = detail.shown()
    if jsonl:
        export_jsonl(iter(shown), sys.stdout)
        return
    if as_json:
        _print_detail_json(detail, shown, calls)
        return
    _print_rows(detail, shown)
    _print_calls(detail, all_calls)


def _print_detail_json(
    detail: ConversationDetail, shown: list[StoredMessage], calls: list[CallCost]
) -> None:
    rows_json = [{**row.to_json(), "active": _is_active(row, detail)} for row in shown]
    summaries = [
        {
            "idx": c.idx,
            "covers": [c.first, c.covers_until],
            "tokens": c.tokens,
            "active": c.active,
            "fallback_reason": c.fallback_reason,
        }
        for c in detail.summaries
    ]
    costs = [{"seq": c.seq, "kind": c.kind, "name": c.name, **c.line.to_json()} for c in calls]
    print_json({"stats": detail.stats(), "rows": rows_json, "summaries": summaries, "calls": costs})


def _print_calls(detail: ConversationDetail, all_calls: bool) -> None:
    """The conversation's model calls (``conversation_calls``): the latest
    ``_CALLS``, or every one."""
    calls = detail.calls if all_calls else detail.calls[-_CALLS:]
    if not calls:
        return
    console = stdout_console()
    console.print()
    earlier = len(detail.calls) - len(calls)
    more = f" (the latest {len(calls)}; --calls lists all {len(detail.calls)})" if earlier else ""
    console.print(f"model calls{more}")
    table = RowTable(console, _CALL_COLUMNS, right=("seq", "input", "output", "cost"))
    for call in calls:
        usage = call.line.usage
        table.add_row(
            str(call.seq),
            call.name,
            str(usage.input_tokens),
            str(usage.output_tokens),
            f"${call.line.cost:.6f}",
        )
    table.print()


def _print_rows(detail: ConversationDetail, shown: list[StoredMessage]) -> None:
    console = stdout_console()
    print_table(console, key_values([(k, str(v)) for k, v in detail.stats().items()]))
    console.print()
    table = RowTable(console, _COLUMNS, right=("idx", "tokens"), free=("text",))
    for row in shown:
        table.add_row(
            str(row.idx),
            _state(row, detail.active),
            str(row.message.get("role")),
            str(row.tokens),
            short_time(row.created_at),
            Text(clip(" ".join(text_of(row.message).split()), _TEXT_WIDTH)),
        )
    table.print()


def _is_active(row: StoredMessage, detail: ConversationDetail) -> bool:
    return row.carried is None and row.idx in detail.active


def _state(row: StoredMessage, active: frozenset[int]) -> str:
    if row.carried is not None:
        # From the archive a handoff carried: its idx is the earlier conversation's.
        return f"carried from {row.carried.get('task_id')}"
    if row.kind == "summary":
        state = "summary" if row.idx in active else "old summary"
        # A summary the extractive fallback wrote says so (cairn.agent.fallback).
        return f"{state} (fallback)" if (row.meta or {}).get("fallback") else state
    return "active" if row.idx in active else "archived"
