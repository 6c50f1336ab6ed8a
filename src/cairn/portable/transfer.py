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

Neither holds the batch in memory: a batch of 100,000 tasks is a file of tens
of megabytes, and its rows as Python dicts took ten times that. An export
writes each row as the store reads it (a page at a time, inside the one
snapshot). An import reads the file three times, a line at a time: once to
check all of it (every line and value, the trailer, the blobs the rows refer
to, the ids the target already has) before it writes anything, once for the
blobs, and once for the rows, which the store inserts as they come, in its one
transaction. The keys that grow
with a batch (the blobs an export appends, the conversation keys an import
checks) are kept on disk (``cairn.store.scratch``).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import io
import json
import math
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any

from cairn.blobs.in_store import hashes_in
from cairn.blobs.protocol import BlobStore
from cairn.clock import SystemClock, from_iso, to_iso
from cairn.errors import BlobCorrupt, TransferError
from cairn.redaction import redact
from cairn.store import sqlmove, tables
from cairn.store.admin import AdminStore, admin
from cairn.store.protocol import Store
from cairn.store.scratch import Scratch
from cairn.store.sqltransfer import TASKS_PER_LOOK
from cairn.store.tables import Column, Table

FORMAT = "cairn-export"
VERSION = 2
_READS = (1, 2)  # the versions this cairn imports
_TABLES: dict[str, Table] = {part.table.name: part.table for part in sqlmove.BATCH_PARTS}
# Worked out once, not once per row of a file (a row is checked twice).
_CARRIED: dict[str, tuple[Column, ...]] = {name: t.carried for name, t in _TABLES.items()}
_NAMES: dict[str, frozenset[str]] = {name: frozenset(t.names()) for name, t in _TABLES.items()}
_REFERRING: dict[str, tuple[Column, ...]] = {
    name: tuple(c for c in t.written if c.refers_to is not None) for name, t in _TABLES.items()
}
_IDENTITY: dict[str, Column | None] = {name: t.identity for name, t in _TABLES.items()}
# The conflicts an import names: five, and "..." if there are more.
_SHOWN = 5


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
    """A row as the file holds it: as a record holds it, with a time as ISO text,
    and its recorded error redacted (a store written before cairn redacted
    every error may hold a key there: the file does not carry it on)."""
    exported = {k: to_iso(v) if isinstance(v, datetime) else v for k, v in row.items()}
    error = exported.get("error")
    if isinstance(error, str):
        exported["error"] = redact(error)
    return exported


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


# -- reading a file -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Line:
    """Where in the file an entry is, named only if something is wrong with it."""

    name: str
    number: int

    def __str__(self) -> str:
        return f"{self.name}, line {self.number}"


@dataclass(frozen=True, slots=True)
class _Row:
    """A row line, checked as far as its table; ``complete`` checks its columns
    (a read that skips rows does not)."""

    table: str
    given: Any
    where: _Line

    def complete(self) -> dict[str, Any]:
        return _complete(_TABLES[self.table], self.given, self.where)


@dataclass(frozen=True, slots=True)
class _Blob:
    """A blob line; ``data`` decodes it and checks its hash (a read that skips
    blobs does neither)."""

    digest: str
    encoded: str
    where: _Line

    def data(self) -> bytes:
        try:
            data = base64.b64decode(self.encoded, validate=True)
        except (binascii.Error, ValueError):  # ValueError: text that is not ASCII
            raise TransferError(
                f"{self.where}: blob {self.digest!r:.80} is not base64; damaged file"
            ) from None
        if hashlib.sha256(data).hexdigest() != self.digest:
            raise TransferError(f"{self.where}: blob {self.digest} is corrupt")
        return data


@dataclass(frozen=True, slots=True)
class _End:
    """The trailer: the counts the exporter wrote."""

    rows: Any
    blobs: Any


def _read(lines: Iterable[str], name: str) -> tuple[str, Iterator[_Row | _Blob | _End]]:
    """The batch an export file holds, its header checked, and its entries, each
    line read and checked as the iterator reaches it, up to the trailer."""
    it = iter(lines)
    try:
        header = json.loads(next(it))
    except UnicodeDecodeError:  # a text file decodes a block at a time: not just line 1
        raise TransferError(f"{name} is not UTF-8 text: not a cairn export file") from None
    except (StopIteration, ValueError):
        raise TransferError(f"{name} is not a cairn export file (no header line)") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise TransferError(f"{name} is not a cairn export file (format {header!r:.80})")
    version = header.get("version")
    if type(version) is not int or version not in _READS:  # not true, which equals 1
        raise TransferError(
            f"{name} is a cairn export of version {version!r}; this cairn reads "
            f"versions {', '.join(map(str, _READS))}. Import it with the cairn that wrote it, "
            "or upgrade cairn."
        )
    batch = header.get("batch")
    if not isinstance(batch, str) or not batch:
        raise TransferError(
            f"{name}, line 1: the header names no batch (its batch is {batch!r:.80}); "
            "the file is damaged, export it again"
        )
    return batch, _entries(it, name)


def _entries(lines: Iterator[str], name: str) -> Iterator[_Row | _Blob | _End]:
    """The lines after the header, each parsed and placed; a file that ends
    before its trailer raises when the iterator reaches its end."""
    for number, line in _numbered(lines, name):
        where = _Line(name, number)
        try:
            item = json.loads(line)
        except ValueError:
            raise TransferError(f"{where}: not JSON; the file is damaged") from None
        if not isinstance(item, dict):
            raise TransferError(f"{where}: not a JSON object {line[:80]!r}; the file is damaged")
        if item.get("end"):
            yield _End(item.get("rows"), item.get("blobs"))
            return
        if "blob" in item:
            digest, data = item["blob"], item.get("data")
            if not isinstance(digest, str) or not isinstance(data, str):
                raise TransferError(
                    f"{where}: a blob without its sha256 and base64 text {line[:80]!r}; "
                    "the file is damaged"
                )
            yield _Blob(digest, data, where)
        elif isinstance(table := item.get("table"), str) and table in _TABLES:
            yield _Row(table, item.get("row"), where)
        else:
            raise TransferError(f"{where}: unknown entry {line[:80]!r}")
    raise TransferError(f"{name} ends without its trailer: it was cut short; export it again")


def _numbered(lines: Iterator[str], name: str) -> Iterator[tuple[int, str]]:
    """The lines after the header, each with its number; bytes that are not
    UTF-8 raise (a text file's reader decodes them as the loop reaches them)."""
    number = 1
    while True:
        number += 1
        try:
            line = next(lines)
        except StopIteration:
            return
        except UnicodeDecodeError:
            raise TransferError(  # somewhere in the block read after the line before
                f"{name} is not UTF-8 text after line {number - 1}; the file is damaged"
            ) from None
        yield number, line


def _complete(table: Table, row: Any, where: _Line) -> dict[str, Any]:
    """``row`` of ``table`` with every column this cairn carries: one the file
    lacks (its version had no such column yet) takes the column's default."""
    if not isinstance(row, dict):
        raise TransferError(f"{where}: a {table.name} row is not an object; the file is damaged")
    if row.keys() == _NAMES[table.name]:  # every column and no other, as this cairn writes
        _check_values(table, row, where)
        return row
    unknown = sorted(set(row) - _NAMES[table.name])
    if unknown:
        raise TransferError(
            f"{where}: table {table.name} has no column {unknown[0]!r}; the file was "
            "written by a newer cairn, or is damaged"
        )
    complete: dict[str, Any] = {}
    for column in _CARRIED[table.name]:
        if column.name in row:
            complete[column.name] = row[column.name]
        elif column.required:
            raise TransferError(f"{where}: a {table.name} row without {column.name}; damaged file")
        else:
            complete[column.name] = column.default
    _check_values(table, complete, where)
    return complete


def _is_time(value: Any) -> bool:
    """ISO 8601 text with an offset, as ``to_iso`` writes a time."""
    if not isinstance(value, str):
        return False
    try:
        return from_iso(value).tzinfo is not None
    except ValueError:
        return False


def _is_integer(value: Any) -> bool:
    """An integer (not true or false) that a 64-bit column holds."""
    return type(value) is int and -(2**63) <= value < 2**63


def _is_narrow(value: Any) -> bool:
    """An integer (not true or false) that a 32-bit column holds (PostgreSQL's
    ``integer``: a column not described as wide)."""
    return type(value) is int and -(2**31) <= value < 2**31


def _unstorable(value: str) -> str | None:
    """What in ``value`` no store can hold, if anything: a NUL character
    (PostgreSQL text refuses it) or a lone surrogate (not UTF-8 at all). A
    cairn export never holds either, as cairn refuses them when it writes."""
    if "\x00" in value:
        return (
            f"holds a NUL character ('\\x00' at position {value.index(chr(0))}), "
            "which PostgreSQL cannot store"
        )
    if value.isascii():
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"holds a lone surrogate ({value[exc.start]!r} at position {exc.start}), "
            "which no store can hold"
        )
    return None


# What a value of each kind of column is in an export file (``cairn.store.tables``),
# and how an error says it: a version 1 file holds a ``micros`` time as its stored
# integer and a flag as 0 or 1.
_KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "text": (lambda v: isinstance(v, str), "text"),
    "integer": (_is_integer, "an integer"),
    "real": (
        lambda v: _is_integer(v) or (type(v) is float and math.isfinite(v)),
        "a finite number",
    ),
    "bool": (lambda v: type(v) is bool or (type(v) is int and v in (0, 1)), "true or false"),
    "time": (_is_time, "an ISO 8601 time with an offset"),
    "micros": (lambda v: _is_integer(v) or _is_time(v), "an ISO 8601 time with an offset"),
    "packed": (lambda v: isinstance(v, str), "JSON text"),
}
_NARROW = (_is_narrow, "an integer that fits in 32 bits")


def _check_of(column: Column) -> tuple[str, bool, Callable[[Any], bool], str, bool]:
    """How ``_check_values`` checks ``column``: its name, whether it may be null,
    the check of its kind and what the error calls that, and whether its text
    must be text a store can hold."""
    ok, expected = _NARROW if column.kind == "integer" and not column.wide else _KINDS[column.kind]
    return column.name, column.nullable, ok, expected, column.kind in ("text", "packed")


# Each table's columns with the check of their kind, worked out once.
_CHECKS: dict[str, tuple[tuple[str, bool, Callable[[Any], bool], str, bool], ...]] = {
    name: tuple(_check_of(c) for c in columns) for name, columns in _CARRIED.items()
}
# The columns that may refer to a blob, for each table.
_BLOB_COLUMNS: dict[str, tuple[str, ...]] = {
    name: tuple(c.name for c in columns if c.blob_refs) for name, columns in _CARRIED.items()
}


def _check_values(table: Table, row: dict[str, Any], where: _Line) -> None:
    """Raise unless each value of ``row`` is of its column's kind (or null where
    the column may be), and text a store can hold: the store would fail on it
    part-way through writing (or SQLite would keep what PostgreSQL cannot)."""
    for column, nullable, ok, expected, text in _CHECKS[table.name]:
        value = row[column]
        if value is None:
            if nullable:
                continue
        elif ok(value):
            if text and (wrong := _unstorable(value)) is not None:
                raise TransferError(f"{where}: a {table.name} row's {column} {wrong}; damaged file")
            continue
        raise TransferError(
            f"{where}: a {table.name} row's {column} is {value!r:.80}, not {expected}; damaged file"
        )


class _Rereadable:
    """An export file's lines, read once per pass of an import (and again by a
    try again of its transaction). A list is read again as it is; a seekable
    text file from where it stood; anything else that reads only once (a
    generator) is copied to a temporary file first, each line as a JSON
    string, so that it comes back exactly as given."""

    def __init__(self, lines: Iterable[str]) -> None:
        self._lines = lines
        self._start: int | None = None
        self._spool: IO[str] | None = None
        if iter(lines) is not lines:  # a collection: each iter() starts afresh
            return
        if isinstance(lines, io.TextIOBase) and lines.seekable():
            with contextlib.suppress(OSError):  # no position while a for loop reads it
                self._start = lines.tell()
                return
        self._spool = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115 - closed by close()
        for line in lines:
            self._spool.write(json.dumps(line) + "\n")

    def lines(self) -> Iterable[str]:
        if self._spool is not None:
            self._spool.seek(0)
            return (json.loads(line) for line in self._spool)
        if self._start is not None:
            assert isinstance(self._lines, io.TextIOBase)
            self._lines.seek(self._start)
        return self._lines

    def close(self) -> None:
        if self._spool is not None:
            self._spool.close()

    def __enter__(self) -> _Rereadable:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- import ---------------------------------------------------------------------------
@dataclass
class _Survey:
    """What the first read of an import found, having written nothing."""

    batch: str
    rows: int = 0
    tasks: int = 0
    blobs: int = 0
    # What the target already has (the first few): the import is refused.
    conflicts: list[str] = field(default_factory=list)
    # The first row that refers to a key no row before it gives: a damaged file.
    dangling: str | None = None


def import_batch(
    store: Store, blobs: BlobStore | None, lines: Iterable[str], name: str = "the file"
) -> TransferSummary:
    """Add the batch exported in ``lines`` to ``store``: all of it, or nothing.

    ``lines`` is read a line at a time, three times over (see the module's
    docstring), so memory does not grow with the batch: a list of lines, a
    text file, or any iterable of lines (copied to a temporary file first)."""
    target = admin(store, "cairn import")
    with _Rereadable(lines) as source:
        survey = _survey(target, source.lines(), name)
        _refuse(survey, store, blobs)
        if blobs is not None and survey.blobs:  # blobs first: no record points at nothing
            _put_blobs(source.lines(), name, blobs)
        target.import_rows(_FileRows(source, name))
    return TransferSummary(survey.batch, survey.tasks, survey.rows, survey.blobs)


def _survey(target: AdminStore, lines: Iterable[str], name: str) -> _Survey:
    """Read the whole file, writing nothing: each line checked (a damaged one
    raises at once), the trailer's counts, the ids the target already has,
    whether each row refers only to keys given before it, and whether the file
    holds every blob its rows refer to."""
    batch, entries = _read(lines, name)
    survey = _Survey(batch)
    if target.batch_task_name(batch) is not None:
        survey.conflicts.append(f"batch {batch!r}")
    conflicts = _Conflicts(target, survey.conflicts)
    with Scratch() as digests, Scratch() as wanted, _References(name) as references:
        for entry in entries:
            if isinstance(entry, _Blob):
                entry.data()
                digests.add(entry.digest)
            elif isinstance(entry, _Row):
                row = entry.complete()
                _check_batch(entry, row, batch)
                for digest in _refers_to(entry, row):
                    if digest not in wanted:  # the first row to refer to it
                        wanted.put(digest, str(entry.where))
                survey.rows += 1
                survey.tasks += entry.table == tables.TASKS.name
                conflicts.note(entry.table, row)
                survey.dangling = survey.dangling or references.check(entry.table, row)
            elif entry.rows != survey.rows or entry.blobs != len(digests):
                raise TransferError(f"{name}: the trailer's counts do not match; damaged file")
        conflicts.flush()
        for digest in wanted.sorted():
            if digest not in digests:
                where = wanted.get(digest)
                assert where is not None
                raise TransferError(
                    f"{where[0]}: the row refers to blob {digest}, which the file does not "
                    "hold; damaged file"
                )
        survey.blobs = len(digests)
    return survey


def _refers_to(entry: _Row, row: dict[str, Any]) -> set[str]:
    """The blobs ``row`` refers to; a damaged reference raises."""
    try:
        return hashes_in(row[c] for c in _BLOB_COLUMNS[entry.table])
    except BlobCorrupt as err:
        raise TransferError(f"{entry.where}: {err}; damaged file") from None


def _check_batch(entry: _Row, row: dict[str, Any], batch: str) -> None:
    """Raise if ``row`` (the batch's own, or a task) is of a batch other than the
    file's: an export holds one batch."""
    if entry.table == tables.BATCHES.name:
        of = row["name"]
    elif entry.table == tables.TASKS.name:
        of = row["batch"]
    else:
        return
    if of != batch:
        raise TransferError(
            f"{entry.where}: a {entry.table} row of batch {of!r:.80}, in the export of "
            f"batch {batch!r}; damaged file"
        )


class _Conflicts:
    """Notes in ``found``, in file order, each row whose id the target has
    already, until there are more than the error shows. Task ids are looked up
    a page at a time (``TASKS_PER_LOOK`` in one query: a batch may have 100,000
    tasks); an operation, one query each (a file's tasks all come before its
    operations, so the order is the file's)."""

    def __init__(self, target: AdminStore, found: list[str]) -> None:
        self._target = target
        self._found = found
        self._tasks: list[str] = []  # ids not looked up yet

    def note(self, table: str, row: dict[str, Any]) -> None:
        if table == tables.TASKS.name:
            self._tasks.append(row["id"])
            if len(self._tasks) >= TASKS_PER_LOOK:
                self.flush()
            return
        self.flush()
        if len(self._found) > _SHOWN:
            return
        if table != "operations":
            return
        if self._target.get_operation(row["scope"], row["key"]) is not None:
            self._found.append(f"operation {row['key']!r} (scope {row['scope']!r})")

    def flush(self) -> None:
        """Look up the task ids noted since the last look."""
        ids, self._tasks = self._tasks, []
        if not ids or len(self._found) > _SHOWN:
            return
        present = self._target.tasks_present(ids)
        for task_id in ids:
            if task_id in present:
                self._found.append(f"task {task_id!r}")
                if len(self._found) > _SHOWN:
                    return


class _References:
    """Finds a row that refers to a key (a conversation's) that no row before it
    has: the store gives such keys anew, in file order. The keys seen are kept
    on disk: a batch may have a conversation per task."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._seen = {n: Scratch() for n, t in _TABLES.items() if t.identity is not None}

    def check(self, table_name: str, row: dict[str, Any]) -> str | None:
        """What is wrong with ``row``'s references, if anything; notes its key."""
        for column in _REFERRING[table_name]:
            ref = column.refers_to
            seen = self._seen.get(ref) if ref is not None else None
            if seen is None or row[column.name] not in seen:
                return (
                    f"{self._name}: a {table_name} row refers to {ref} "
                    f"{row[column.name]!r}, which comes before it nowhere in the file; "
                    "damaged file"
                )
        identity = _IDENTITY[table_name]
        if identity is not None:
            self._seen[table_name].add(row[identity.name])
        return None

    def __enter__(self) -> _References:
        return self

    def __exit__(self, *exc: object) -> None:
        for seen in self._seen.values():
            seen.close()


def _refuse(survey: _Survey, store: Store, blobs: BlobStore | None) -> None:
    """Raise if the import must not go ahead, before it writes anything."""
    if survey.conflicts:
        shown = ", ".join(survey.conflicts[:_SHOWN])
        more = ", ..." if len(survey.conflicts) > _SHOWN else ""
        raise TransferError(
            f"{store.url} already has {shown}{more}; nothing was imported. Import into "
            "another store, or prune that batch there first."
        )
    if survey.blobs and blobs is None:
        raise TransferError(
            f"the export holds {survey.blobs} blob(s) but {store.url} has no blob store; "
            "pass --blobs URL (or set CAIRN_BLOBS). Nothing was imported."
        )
    if survey.dangling is not None:
        raise TransferError(survey.dangling)


def _put_blobs(lines: Iterable[str], name: str, blobs: BlobStore) -> None:
    """Store every blob of the file (each decoded and checked again, one at a time)."""
    _, entries = _read(lines, name)
    for entry in entries:
        if isinstance(entry, _Blob):
            blobs.put(entry.digest, entry.data())


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


class _FileRows:
    """The rows of an export file as the store inserts them (running tasks
    released), read from the file afresh each time they are iterated: the
    store's try again of its transaction reads them again."""

    def __init__(self, source: _Rereadable, name: str) -> None:
        self._source = source
        self._name = name

    def __iter__(self) -> Iterator[tuple[str, dict[str, Any]]]:
        _, entries = _read(self._source.lines(), self._name)
        for entry in entries:
            if isinstance(entry, _Row):
                row = entry.complete()
                yield entry.table, _released(row) if entry.table == tables.TASKS.name else row
