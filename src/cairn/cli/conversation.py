"""``cairn conversation TASK``: a task's conversation, active context or all of it.

By default the active context (system prompt, latest summary, the messages
after it); ``--all`` adds the archived head, every row ever appended.
``--jsonl`` exports the rows as JSON Lines; ``--handoff`` prints the handoff
document a Day 2 task can start from.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.text import Text

from cairn.agent.archive import (
    ConversationView,
    StoredMessage,
    export_jsonl,
    iter_history,
    load_conversation,
)
from cairn.agent.message_blobs import MessageReader
from cairn.agent.messages import text_of
from cairn.clock import SystemClock
from cairn.errors import UnknownTask
from cairn.store import AdminStore

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


def conversation_name(store: AdminStore, task_id: str, name: str | None) -> str:
    """The conversation to show: ``name``, else main, else the task's only one."""
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


def conversation_command(
    task_id: TaskArgument,
    name: NameOption = None,
    show_all: Annotated[
        bool, typer.Option("--all", help="Every row, the archived head included.")
    ] = False,
    jsonl: Annotated[bool, typer.Option("--jsonl", help="Export rows as JSON Lines.")] = False,
    handoff: Annotated[
        bool, typer.Option("--handoff", help="Print the handoff document (JSON).")
    ] = False,
    store: StoreOption = DEFAULT_URL,
    blobs: BlobsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show a task's conversation: its active context, or with --all every message."""
    with opened_store(store) as opened:
        get_task_or_fail(opened, task_id)
        conv = conversation_name(opened, task_id, name)
        # Messages above the inline limit are read from the blob store.
        reader = MessageReader(blobs_for(store, blobs), store_url=opened.url)
        view = load_conversation(opened, task_id, conv, blobs=reader)
        assert view is not None  # it has rows: conversation_name found it
        active = {row.idx for row in view.active_rows()}
        rows = list(iter_history(opened, task_id, conv, blobs=reader)) if show_all else None
    if handoff:
        print_json(view.handoff(now=SystemClock().now()))
        return
    shown = rows if rows is not None else view.active_rows()
    if jsonl:
        export_jsonl(iter(shown), sys.stdout)
        return
    if as_json:
        rows_json = [{**row.to_json(), "active": row.idx in active} for row in shown]
        print_json({"stats": _stats(view), "rows": rows_json})
        return
    console = stdout_console()
    print_table(console, key_values([(k, str(v)) for k, v in _stats(view).items()]))
    console.print()
    table = RowTable(console, _COLUMNS, right=("idx", "tokens"), free=("text",))
    for row in shown:
        table.add_row(
            str(row.idx),
            _state(row, active),
            str(row.message.get("role")),
            str(row.tokens),
            short_time(row.created_at),
            Text(clip(" ".join(text_of(row.message).split()), _TEXT_WIDTH)),
        )
    table.print()


def _stats(view: ConversationView) -> dict[str, object]:
    stats = view.stats
    return {
        "task": view.task_id,
        "conversation": view.name,
        "rows": stats.rows,
        "compactions": stats.compactions,
        "archived messages": stats.archived_messages,
        "active tokens": stats.active_tokens,
        "tokens without compaction": stats.full_tokens,
    }


def _state(row: StoredMessage, active: set[int]) -> str:
    if row.kind == "summary":
        return "summary" if row.idx in active else "old summary"
    return "active" if row.idx in active else "archived"
