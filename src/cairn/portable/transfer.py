"""Moving one batch between stores: ``cairn export`` and ``cairn import``.

Export file format, version 1: UTF-8 JSON Lines.

1. A header: ``{"format": "cairn-export", "version": 1, "batch": NAME,
   "exported_at": ISO, "source": URL}``.
2. One line per row, ``{"table": T, "row": {column: value}}``, for tables
   ``batches``, ``tasks``, ``steps``, ``operations``, ``conversations`` (with the
   source's ``conv_id``) and ``messages`` (``conv_id`` is the source's; ``content``
   is the message's JSON text). Times are ISO 8601 text with an offset.
3. One line per blob the rows refer to: ``{"blob": SHA256, "data": BASE64}``.
4. A trailer: ``{"end": true, "rows": N, "blobs": M}``; a file without it was cut
   short and is refused.

The export is read in one transaction, so it is consistent even while the batch
runs. An import writes the blobs first (checking each hash), then every row in
one transaction: it all lands, or nothing does. A task that was running when it
was exported comes in as pending (its owner is on the other machine), so the
next ``run_batch`` or worker on this store resumes it from its recorded steps.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any

from cairn.blobs.protocol import BlobStore
from cairn.clock import SystemClock, to_iso
from cairn.errors import TransferError
from cairn.portable._refs import hashes_in, sql_store
from cairn.store import sql, sqlmove
from cairn.store.protocol import Store
from cairn.store.sqlbase import SQLStore, Tx

FORMAT = "cairn-export"
VERSION = 1
_ROW_TABLES = (
    sqlmove.BATCHES,
    sqlmove.TASKS,
    sqlmove.STEPS,
    sqlmove.OPERATIONS,
    sqlmove.SIGNALS,
)


@dataclass(frozen=True)
class TransferSummary:
    """What an export wrote or an import read."""

    batch: str
    tasks: int
    rows: int
    blobs: int


def _plain(value: Any) -> Any:
    return to_iso(sql.time_of(value)) if isinstance(value, datetime) else value


def _rows_of(store: SQLStore, batch: str) -> list[tuple[str, dict[str, Any]]]:
    """Every row of ``batch``, read in one transaction."""

    def read(tx: Tx) -> list[tuple[str, dict[str, Any]]]:
        out: list[tuple[str, dict[str, Any]]] = []
        queries = (
            sqlmove.BATCH_ROW,
            sqlmove.BATCH_TASKS,
            sqlmove.BATCH_STEPS,
            sqlmove.BATCH_OPERATIONS,
            sqlmove.BATCH_SIGNALS,
        )
        for table, query in zip(_ROW_TABLES, queries, strict=True):
            for row in tx.exec(query, (batch,)).rows:
                out.append((table.name, dict(zip(table.columns, map(_plain, row), strict=True))))
        for conv_id, task_id, name in tx.exec(sqlmove.BATCH_CONVERSATIONS, (batch,)).rows:
            out.append(("conversations", {"conv_id": conv_id, "task_id": task_id, "name": name}))
            for row in tx.exec(sqlmove.CONVERSATION_MESSAGES, (conv_id,)).rows:
                message = dict(zip(sqlmove.MESSAGES.columns, row, strict=True))
                message["content"] = sql.unpack_content(bytes(message["content"]))
                out.append(("messages", message))
        return out

    with store._writing():
        return store._atomically(read)


def export_batch(
    store: Store, blobs: BlobStore | None, batch: str, out: IO[str]
) -> TransferSummary:
    """Write batch ``batch`` of ``store``, with the blobs it refers to, to ``out``."""
    source = sql_store(store, "cairn export")
    rows = _rows_of(source, batch)
    if not rows or rows[0][0] != "batches":
        raise TransferError(f"no batch named {batch!r} in {store.url}; see `cairn batches`")
    wanted = hashes_in(value for _, row in rows for value in row.values())
    if wanted and blobs is None:
        raise TransferError(
            f"batch {batch!r} refers to {len(wanted)} blob(s) but no blob store is configured; "
            "pass --blobs URL (or set CAIRN_BLOBS)"
        )
    header = {
        "format": FORMAT,
        "version": VERSION,
        "batch": batch,
        "exported_at": to_iso(SystemClock().now()),
        "source": store.url,
    }
    out.write(json.dumps(header) + "\n")
    for table, row in rows:
        out.write(json.dumps({"table": table, "row": row}, ensure_ascii=False) + "\n")
    for digest in sorted(wanted):
        assert blobs is not None
        data = blobs.get(digest)
        out.write(json.dumps({"blob": digest, "data": base64.b64encode(data).decode()}) + "\n")
    out.write(json.dumps({"end": True, "rows": len(rows), "blobs": len(wanted)}) + "\n")
    tasks = sum(1 for table, _ in rows if table == "tasks")
    return TransferSummary(batch, tasks, len(rows), len(wanted))


@dataclass
class _Export:
    batch: str
    rows: list[tuple[str, dict[str, Any]]]
    blobs: dict[str, bytes]


def _read(lines: Iterable[str], name: str) -> _Export:
    it = iter(lines)
    try:
        header = json.loads(next(it))
    except (StopIteration, ValueError):
        raise TransferError(f"{name} is not a cairn export file (no header line)") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise TransferError(f"{name} is not a cairn export file (format {header!r:.80})")
    if header.get("version") != VERSION:
        raise TransferError(
            f"{name} is a cairn export of version {header.get('version')!r}; this cairn reads "
            f"version {VERSION} only. Import it with the cairn that wrote it, or upgrade cairn."
        )
    rows: list[tuple[str, dict[str, Any]]] = []
    blobs: dict[str, bytes] = {}
    known = {t.name for t in _ROW_TABLES} | {"conversations", "messages"}
    for number, line in enumerate(it, start=2):
        try:
            item = json.loads(line)
        except ValueError:
            raise TransferError(f"{name}, line {number}: not JSON; the file is damaged") from None
        if item.get("end"):
            if item.get("rows") != len(rows) or item.get("blobs") != len(blobs):
                raise TransferError(f"{name}: the trailer's counts do not match; damaged file")
            return _Export(str(header["batch"]), rows, blobs)
        if "blob" in item:
            data = base64.b64decode(item["data"])
            if hashlib.sha256(data).hexdigest() != item["blob"]:
                raise TransferError(f"{name}, line {number}: blob {item['blob']} is corrupt")
            blobs[item["blob"]] = data
        elif item.get("table") in known:
            rows.append((item["table"], item["row"]))
        else:
            raise TransferError(f"{name}, line {number}: unknown entry {line[:80]!r}")
    raise TransferError(f"{name} ends without its trailer: it was cut short; export it again")


def _conflicts(store: SQLStore, export: _Export) -> list[str]:
    found: list[str] = []
    if store._exec(sqlmove.BATCH_EXISTS, (export.batch,)).rows:
        found.append(f"batch {export.batch!r}")
    for table, row in export.rows:
        if table == "tasks" and store._exec(sqlmove.TASK_EXISTS, (row["id"],)).rows:
            found.append(f"task {row['id']!r}")
        elif (
            table == "operations"
            and store._exec(sqlmove.OPERATION_EXISTS, (row["scope"], row["key"])).rows
        ):
            found.append(f"operation {row['key']!r} (scope {row['scope']!r})")
    return found


def _values(store: SQLStore, table: sqlmove.Table, row: dict[str, Any]) -> list[Any]:
    return [
        store._ts(sql.time_of(row[c])) if c in table.times and row[c] is not None else row[c]
        for c in table.columns
    ]


def _released(row: dict[str, Any]) -> dict[str, Any]:
    """A task that was running elsewhere comes in pending, its recorded steps kept."""
    if row["status"] != "running":
        return row
    return {
        **row,
        "status": "pending",
        "owner": None,
        "lease_expires_at": None,
        "fence": int(row["fence"]) + 1,
    }


def import_batch(
    store: Store, blobs: BlobStore | None, lines: Iterable[str], name: str = "the file"
) -> TransferSummary:
    """Add the batch exported in ``lines`` to ``store``: all of it, or nothing."""
    target = sql_store(store, "cairn import")
    export = _read(lines, name)
    conflicts = _conflicts(target, export)
    if conflicts:
        shown = ", ".join(conflicts[:5]) + (", ..." if len(conflicts) > 5 else "")
        raise TransferError(
            f"{store.url} already has {shown}; nothing was imported. Import into another "
            "store, or prune that batch there first."
        )
    if export.blobs and blobs is None:
        raise TransferError(
            f"the export holds {len(export.blobs)} blob(s) but {store.url} has no blob store; "
            "pass --blobs URL (or set CAIRN_BLOBS). Nothing was imported."
        )
    for digest, data in export.blobs.items():  # blobs first: no record points at nothing
        assert blobs is not None
        blobs.put(digest, data)

    def write(tx: Tx) -> None:
        conv_ids: dict[int, int] = {}
        for table_name, row in export.rows:
            if table_name == "conversations":
                new = tx.exec(sqlmove.INSERT_CONVERSATION, (row["task_id"], row["name"]))
                conv_ids[int(row["conv_id"])] = int(new.rows[0][0])
            elif table_name == "messages":
                values = dict(row)
                values["conv_id"] = conv_ids[int(row["conv_id"])]
                values["content"] = sql.pack_content(row["content"])
                tx.exec(sqlmove.MESSAGES.insert(), _values(target, sqlmove.MESSAGES, values))
            else:
                table = next(t for t in _ROW_TABLES if t.name == table_name)
                if table is sqlmove.TASKS:
                    row = _released(row)
                tx.exec(table.insert(), _values(target, table, row))

    with target._writing():
        target._atomically(write)
    tasks = sum(1 for table, _ in export.rows if table == "tasks")
    return TransferSummary(export.batch, tasks, len(export.rows), len(export.blobs))
