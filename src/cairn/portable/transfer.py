"""Moving one batch between stores: ``cairn export`` and ``cairn import``.

Export file format, version 2: UTF-8 JSON Lines.

1. A header: ``{"format": "cairn-export", "version": 2, "batch": NAME,
   "exported_at": ISO, "source": URL}``.
2. One line per row, ``{"table": T, "row": {column: value}}``, for the tables of
   a batch in ``cairn.store.sqlmove.BATCH_PARTS`` order: ``batches``, ``tasks``,
   ``steps``, ``operations``, ``signals``, ``conversations`` and ``messages``.
   A row holds every column its table has (``cairn.store.tables``), each value
   as a record holds it: times as ISO 8601 text with an offset, flags as
   true/false, a message's content as its JSON text. A conversation carries the
   source's ``conv_id``, which its messages' ``conv_id`` refers to; the importing
   store gives it a key of its own. (Tasks are in the order they were enqueued.)
3. One line per blob the rows refer to: ``{"blob": SHA256, "data": BASE64}``.
4. A trailer: ``{"end": true, "rows": N, "blobs": M}``; a file without it was cut
   short and is refused.

Version 1 files still import. They lack columns added since (``steps.deferred``,
``operations.late_result`` and ``late_at``), which take their defaults, and hold
a message's ``created_at`` as integer microseconds and flags as 0/1.

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
from cairn.clock import SystemClock, from_iso, to_iso
from cairn.errors import TransferError
from cairn.portable._refs import hashes_in, sql_store
from cairn.store import sql, sqlmove, tables
from cairn.store.protocol import Store
from cairn.store.sqlbase import SQLStore, Tx
from cairn.store.tables import Column, Table

FORMAT = "cairn-export"
VERSION = 2
_READS = (1, 2)  # the versions this cairn imports
_TABLES: dict[str, Table] = {part.table.name: part.table for part in sqlmove.BATCH_PARTS}
_INSERTS: dict[str, str] = {name: sqlmove.insert(table) for name, table in _TABLES.items()}


@dataclass(frozen=True)
class TransferSummary:
    """What an export wrote or an import read."""

    batch: str
    tasks: int
    rows: int
    blobs: int


# -- a row as the file holds it ------------------------------------------------------------
def _exported(column: Column, value: Any) -> Any:
    """A stored value of ``column`` as the file holds it: as a record holds it
    (``cairn.store.sql.value_reader``), with a time as ISO text."""
    read = sql.value_reader(column)
    if value is None or read is None:
        return value
    value = read(value)
    return to_iso(value) if isinstance(value, datetime) else value


def _stored(store: SQLStore, column: Column, value: Any) -> Any:
    """A value of ``column`` from the file, as a parameter for ``store``."""
    if value is None:
        return None
    if column.kind == "time":
        return store._ts(sql.time_of(value))
    if column.kind == "micros":  # version 1 wrote the stored integer itself
        return value if isinstance(value, int) else sql.micros_of(from_iso(value))
    if column.kind == "packed":
        return sql.pack_content(value)
    if column.kind == "bool":  # version 1 wrote the stored 0 or 1
        return int(bool(value))
    if column.kind == "real":
        return float(value)
    return value


def _rows_of(store: SQLStore, batch: str) -> list[tuple[str, dict[str, Any]]]:
    """Every row of ``batch``, read in one transaction."""

    def read(tx: Tx) -> list[tuple[str, dict[str, Any]]]:
        out: list[tuple[str, dict[str, Any]]] = []
        for part in sqlmove.BATCH_PARTS:
            columns = part.table.carried
            for row in tx.exec(part.select, (batch,)).rows:
                pairs = zip(columns, row, strict=True)
                out.append((part.table.name, {c.name: _exported(c, v) for c, v in pairs}))
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
    if header.get("version") not in _READS:
        raise TransferError(
            f"{name} is a cairn export of version {header.get('version')!r}; this cairn reads "
            f"versions {', '.join(map(str, _READS))}. Import it with the cairn that wrote it, "
            "or upgrade cairn."
        )
    rows: list[tuple[str, dict[str, Any]]] = []
    blobs: dict[str, bytes] = {}
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
        elif item.get("table") in _TABLES:
            table = _TABLES[item["table"]]
            rows.append((table.name, _complete(table, item.get("row"), f"{name}, line {number}")))
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


def _complete(table: Table, row: Any, where: str) -> dict[str, Any]:
    """``row`` of ``table`` with every column this cairn carries: one the file
    lacks (its version had no such column yet) takes the column's default."""
    if not isinstance(row, dict):
        raise TransferError(f"{where}: a {table.name} row is not an object; the file is damaged")
    unknown = sorted(set(row) - set(table.names()))
    if unknown:
        raise TransferError(
            f"{where}: table {table.name} has no column {unknown[0]!r}; the file was "
            "written by a newer cairn, or is damaged"
        )
    complete: dict[str, Any] = {}
    for column in table.carried:
        if column.name in row:
            complete[column.name] = row[column.name]
        elif column.required:
            raise TransferError(f"{where}: a {table.name} row without {column.name}; damaged file")
        else:
            complete[column.name] = column.default
    return complete


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
        # For each table whose key the store assigns: the file's key -> this store's.
        keys: dict[str, dict[Any, Any]] = {}
        for table_name, row in export.rows:
            table = _TABLES[table_name]
            if table is tables.TASKS:
                row = _released(row)
            params = []
            for column in table.written:
                value = row[column.name]
                if column.refers_to is not None:
                    known = keys.get(column.refers_to, {})
                    if value not in known:
                        raise TransferError(
                            f"{name}: a {table_name} row refers to {column.refers_to} "
                            f"{value!r}, which comes before it nowhere in the file; damaged file"
                        )
                    value = known[value]
                params.append(_stored(target, column, value))
            new = tx.exec(_INSERTS[table_name], params)
            identity = table.identity
            if identity is not None:
                keys.setdefault(table_name, {})[row[identity.name]] = new.rows[0][0]

    with target._writing():
        target._atomically(write)
    tasks = sum(1 for table, _ in export.rows if table == "tasks")
    return TransferSummary(export.batch, tasks, len(export.rows), len(export.blobs))
