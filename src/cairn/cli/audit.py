"""``cairn audit``: the operator actions made on the store, newest first.

Every retry, cancel, rerun, signal and resolve, from the CLI (``cli:USER``),
the dashboard (``ui:TOKEN-NAME``) or the admin API (``api:USER``), with what it
was made on, when, and how many tasks it changed (``cairn.admin.audit``).
"""

from __future__ import annotations

from typing import Annotated

import typer

from cairn.admin.audit import audit_page

from ._consoles import note, stdout_console
from ._field_text import iso_time, short_time
from ._json_output import JsonOption, print_json
from ._store_option import DEFAULT_URL, StoreOption, opened_store
from ._tables import RowTable

_COLUMNS = ("id", "at", "who", "action", "on", "tasks", "outcome")


def audit_command(
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=1000, help="Show this many entries.")
    ] = 50,
    older_than: Annotated[
        int | None,
        typer.Option("--older-than", metavar="ID", help="Entries before this one (paging)."),
    ] = None,
    store: StoreOption = DEFAULT_URL,
    as_json: JsonOption = False,
) -> None:
    """List operator actions, newest first: who made each (cli:USER, ui:NAME,
    api:USER), what, on which task or filter, when, and how many tasks it changed."""
    with opened_store(store) as opened:
        page = audit_page(opened, before=older_than, size=limit)
    if as_json:
        rows = [
            {
                "id": e.id,
                "at": iso_time(e.at),
                "actor": e.actor,
                "action": e.action,
                "target": e.target,
                "detail": e.detail,
                "count": e.count,
                "outcome": e.outcome,
            }
            for e in page.rows
        ]
        print_json({"entries": rows, "older": page.older})
        return
    if not page.rows:
        note("no operator action recorded yet")
        return
    table = RowTable(stdout_console(), _COLUMNS, right=("id", "tasks"), free=("outcome",))
    for e in page.rows:
        count = "?" if e.count is None else str(e.count)
        table.add_row(str(e.id), short_time(e.at), e.actor, e.action, e.target, count,
                      e.outcome or "-")  # fmt: skip
    table.print()
    if page.older is not None:
        note(f"older entries: cairn audit --older-than {page.older}")
