"""Export and import carry every column of every table of a batch, and a prune
deletes the batch from every one of those tables.

A batch whose rows set every column (each to something other than its default)
goes SQLite -> export -> PostgreSQL -> export -> SQLite and is compared column
by column at each store. The columns compared are all those the table
descriptions list, and ``test_tables`` checks those are all the columns the
stores have: a column added to a table is compared here without a change, and
the fixture below must be taught to set it (the test says which one it lacks).

A file written by cairn's version-1 exporter (``export_v1.cairn``, written at
commit a1131de, before format 2) still imports: its values come through, and the
columns it did not carry take their defaults.

Every test here runs on each backend (the conformance suite).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from cairn.clock import to_iso
from cairn.portable import export_batch, import_batch
from cairn.store import open_store, sql, tables
from cairn.store.sqlbase import SQLStore

HERE = Path(__file__).parent.parent  # tests/integration, beside the canonical schemas
V1_FILE = HERE / "export_v1.cairn"


def sql_store(url: str) -> SQLStore:
    store = open_store(url)
    assert isinstance(store, SQLStore)
    return store


def _as_version_2(table: tables.Table, row: dict[str, Any]) -> dict[str, Any]:
    """A version-1 row as version 2 writes the same values: every column (those
    version 1 lacked at their defaults), a message's time as ISO text, a flag as
    a bool."""
    complete: dict[str, Any] = {}
    for column in table.carried:
        value: Any = row.get(column.name, column.default)
        if column.kind == "micros":
            value = to_iso(sql.time_of_micros(value))
        elif column.kind == "bool":
            value = bool(value)
        complete[column.name] = value
    return complete


def test_a_version_1_file_imports_with_its_missing_columns_at_their_defaults(
    store_url: str,
) -> None:
    """The file cairn's version-1 exporter wrote imports into either backend;
    exported again, every value it held is there and the columns version 1 did
    not carry (a step's deferral, an operation's late outcome) have their
    defaults."""
    lines = V1_FILE.read_text(encoding="utf-8").splitlines()
    v1 = [json.loads(line) for line in lines]
    assert v1[0]["version"] == 1
    assert "deferred" not in next(i["row"] for i in v1 if i.get("table") == "steps")
    store = sql_store(store_url)
    try:
        import_batch(store, None, lines, "export_v1.cairn")
        out = io.StringIO()
        export_batch(store, None, "v1", out)
        v2 = [json.loads(line) for line in out.getvalue().splitlines()]
        history = store.load_history("v1/n=1")
        operation = store.get_operation("charge", "v1/n=1/charge")
    finally:
        store.close()
    assert v2[0]["version"] == 2
    expected = [
        {"table": i["table"], "row": _as_version_2(tables.BY_NAME[i["table"]], i["row"])}
        for i in v1
        if "table" in i
    ]
    assert [i for i in v2 if "table" in i] == expected
    assert history[2].deferred == 0.0
    assert operation is not None
    assert (operation.late_result, operation.late_at, operation.permanent) == (None, None, False)
