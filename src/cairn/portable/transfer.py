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

The export is read from one snapshot of the store, so it is consistent even
while the batch runs, and does not stop it. An import writes the blobs first
(checking each hash), then every row in one transaction: it all lands, or
nothing does. A task that was running when it was exported comes in as
pending (its owner is on the other machine), so the next ``run_batch`` or
worker on this store resumes it from its recorded steps.

An export does not hold the batch in memory: a batch of 100,000 tasks is a
file of tens of megabytes, and its rows as Python dicts took ten times that.
It writes each row as the store reads it (a page at a time, inside the one
snapshot), and keeps the blobs the rows refer to, which may be as many as the
rows, on disk (``cairn.store.scratch``) until it appends them.
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
from cairn.portable._refs import hashes_in
from cairn.store import sqlmove, tables
from cairn.store.admin import AdminStore, admin
from cairn.store.protocol import Store
from cairn.store.scratch import Scratch
from cairn.store.tables import Table

FORMAT = "cairn-export"
VERSION = 2
_READS = (1, 2)  # the versions this cairn imports
_TABLES: dict[str, Table] = {part.table.name: part.table for part in sqlmove.BATCH_PARTS}


@dataclass(frozen=True)
class TransferSummary:
    """What an export wrote or an import read."""

    batch: str
    tasks: int
    rows: int
    blobs: int


# -- export ---------------------------------------------------------------------------
def export_batch(
    store: Store, blobs: BlobStore | None, batch: str, out: IO[str]
) -> TransferSummary:
    """Write batch ``batch`` of ``store``, with the blobs it refers to, to ``out``.

    Each row is written as the store reads it, and each blob as it is fetched,
    so memory does not grow with the batch. On an error ``out`` may hold the
    start of an export, without its trailer: an import refuses that (``cairn
    export`` writes to a ``.partial`` file, and deletes it). If the store loses
    its snapshot part-way (a lost connection), a seekable ``out`` is rewound
    and the batch written again from a new one; another ``out`` gets
    ``StoreUnavailable``."""
    source = admin(store, "cairn export")
    with Scratch() as wanted:  # the blobs the rows refer to: as many as the rows, or more
        writer = _RowWriter(out, _header(store, batch), wanted)
        again = writer.again if out.seekable() else None
        source.export_rows(batch, writer.write, again=again)
        if not writer.rows:
            raise _no_batch(store.url, batch)
        if len(wanted) and blobs is None:
            raise TransferError(
                f"batch {batch!r} refers to {len(wanted)} blob(s) but no blob store is "
                "configured; pass --blobs URL (or set CAIRN_BLOBS)"
            )
        for digest in wanted.sorted():
            assert blobs is not None
            data = base64.b64encode(blobs.get(digest)).decode()
            out.write(json.dumps({"blob": digest, "data": data}) + "\n")
        count = len(wanted)
    out.write(json.dumps({"end": True, "rows": writer.rows, "blobs": count}) + "\n")
    return TransferSummary(batch, writer.tasks, writer.rows, count)


def _header(store: Store, batch: str) -> dict[str, Any]:
    """The file's first line: what it is, and what it was exported from, when."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "batch": batch,
        "exported_at": to_iso(SystemClock().now()),
        "source": store.url,
    }


def _no_batch(url: str, batch: str) -> TransferError:
    return TransferError(f"no batch named {batch!r} in {url}; see `cairn batches`")


def _exported(row: dict[str, Any]) -> dict[str, Any]:
    """A row as the file holds it: as a record holds it, with a time as ISO text."""
    return {k: to_iso(v) if isinstance(v, datetime) else v for k, v in row.items()}


class _RowWriter:
    """An export's rows, written as the store hands them over: the header goes
    first, once the batch's own row shows the batch is there (a missing batch
    writes nothing), and the blobs each row refers to are noted in ``wanted``."""

    def __init__(self, out: IO[str], header: dict[str, Any], wanted: Scratch) -> None:
        self._out = out
        self._start = out.tell() if out.seekable() else 0
        self._header = header
        self._wanted = wanted
        self.rows = 0
        self.tasks = 0

    def again(self) -> None:
        """Undo every row written: the store reads the batch again, from a new
        snapshot. Only for a seekable ``out``."""
        self._out.seek(self._start)
        self._out.truncate()
        self._wanted.clear()
        self.rows = self.tasks = 0

    def write(self, table: str, row: dict[str, Any]) -> None:
        if not self.rows:
            if table != tables.BATCHES.name:  # rows of a batch with no batch row
                raise _no_batch(self._header["source"], self._header["batch"])
            self._out.write(json.dumps(self._header) + "\n")
        exported = _exported(row)
        for digest in hashes_in(exported.values()):
            self._wanted.add(digest)
        self._out.write(json.dumps({"table": table, "row": exported}, ensure_ascii=False) + "\n")
        self.rows += 1
        self.tasks += table == tables.TASKS.name


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


def _conflicts(store: AdminStore, export: _Export) -> list[str]:
    found: list[str] = []
    if store.batch_task_name(export.batch) is not None:
        found.append(f"batch {export.batch!r}")
    for table, row in export.rows:
        if table == "tasks" and store.get_task(row["id"]) is not None:
            found.append(f"task {row['id']!r}")
        elif table == "operations" and store.get_operation(row["scope"], row["key"]) is not None:
            found.append(f"operation {row['key']!r} (scope {row['scope']!r})")
    return found


def _check_references(export: _Export, name: str) -> None:
    """Refuse a file whose row refers to a key (a conversation's) that no row
    before it has: the store gives such keys anew, in file order."""
    seen: dict[str, set[Any]] = {}
    for table_name, row in export.rows:
        table = _TABLES[table_name]
        for column in table.written:
            ref = column.refers_to
            if ref is not None and row[column.name] not in seen.get(ref, set()):
                raise TransferError(
                    f"{name}: a {table_name} row refers to {ref} "
                    f"{row[column.name]!r}, which comes before it nowhere in the file; "
                    "damaged file"
                )
        if table.identity is not None:
            seen.setdefault(table_name, set()).add(row[table.identity.name])


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
    target = admin(store, "cairn import")
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

    _check_references(export, name)
    target.import_rows(
        [(t, _released(row) if t == tables.TASKS.name else row) for t, row in export.rows]
    )
    tasks = sum(1 for table, _ in export.rows if table == "tasks")
    return TransferSummary(export.batch, tasks, len(export.rows), len(export.blobs))
