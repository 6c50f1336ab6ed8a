"""The admin side of the shared SQL store, part two: a batch's rows read out and
written in (``cairn export`` / ``import``), finished batches deleted (``cairn
prune``), and the blob references every record holds (``cairn gc``).

The SQL is in ``cairn.store.sqlmove``, built from the table descriptions; this
module runs it through the backend's primitives (``cairn.store.sqlcore``) and
converts values between their stored form and the form a record holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from cairn.clock import from_iso
from cairn.errors import StoreUnavailable
from cairn.store import sql, sqlmove
from cairn.store.reports import StatusCount
from cairn.store.scratch import Scratch
from cairn.store.sqlcore import SQLCore, Tx
from cairn.store.tables import Column, Table

_TABLES: dict[str, Table] = {part.table.name: part.table for part in sqlmove.BATCH_PARTS}
# Worked out once, not per row: an import of 100,000 rows would otherwise spend
# seconds rebuilding these tuples from the table descriptions.
_IDENTITY: dict[str, Column | None] = {name: t.identity for name, t in _TABLES.items()}
# The kinds of column whose value an equality finds as given.
_PLAIN = frozenset({"text", "integer", "time"})
# An import's columns of each table, each with whether its value is its
# parameter as it is (text or an integer, no key to map): most are, and
# ``_param`` costs a call each.
_WRITTEN: dict[str, tuple[tuple[Column, bool], ...]] = {
    name: tuple((c, c.kind in ("text", "integer") and c.refers_to is None) for c in t.written)
    for name, t in _TABLES.items()
}


def _checksum_of(table: str) -> Callable[[list[Any]], int | None] | None:
    """What works out the checksum an imported row of ``table`` is written with,
    from its insert's parameters (a value is checked on replay whichever way it
    came in; the file's own checksum, if it had one, is not trusted), or None
    for a table without one."""
    at = {c.name: i for i, (c, _) in enumerate(_WRITTEN[table])}
    if table == "steps":
        kind, name, output = at["kind"], at["name"], at["output"]
        return lambda p: sql.entry_checksum(p[kind], p[name], p[output])
    if table == "operations":
        key, result = at["key"], at["result"]
        return lambda p: sql.op_checksum(p[key], p[result])
    if table == "messages":
        content, covers = at["content"], at["covers_until"]
        return lambda p: sql.message_checksum(p[content], p[covers])
    return None


_CHECKSUMS = {name: _checksum_of(name) for name in _TABLES}
_INSERTS: dict[str, str] = {
    name: sqlmove.insert(table, derived=("checksum",) if _CHECKSUMS[name] else ())
    for name, table in _TABLES.items()
}
# Rows of one table an import sends in one go (``Tx.exec_many``): few enough to
# hold, many enough that PostgreSQL is not asked one round trip per row.
IMPORT_CHUNK = 500
# Task ids ``tasks_present`` is asked about at once: one query for a page of an
# import's survey, not one per task (well under SQLite's 32,766 parameters).
TASKS_PER_LOOK = 500

# What an export hands each row to as it reads it: (table, {column: value}).
RowSink = Callable[[str, dict[str, Any]], None]
# For each table whose key the store assigns: the key a file gives -> this store's.
Keys = Mapping[str, Scratch]


def _row_reader(table: Table) -> Callable[[tuple[Any, ...]], dict[str, Any]]:
    """What turns a stored row of ``table`` (its carried columns) into
    {column: value as a record holds it}, each column's reader found once."""
    readers = [(c.name, sql.value_reader(c)) for c in table.carried]

    def read(row: tuple[Any, ...]) -> dict[str, Any]:
        pairs = zip(readers, row, strict=True)
        return {name: v if v is None or to is None else to(v) for (name, to), v in pairs}

    return read


class SQLTransfer(SQLCore):
    """Export, import, prune and blob references, over the primitives."""

    def export_rows(
        self, batch: str, sink: RowSink, *, again: Callable[[], None] | None = None
    ) -> int:
        """Hand every row of ``batch`` to ``sink`` as (table, {column: value}),
        tables in ``sqlmove.BATCH_PARTS`` order, values as a record holds them;
        return how many. The rows are read from one snapshot, so consistent
        while the batch runs (which this does not stop), and a page at a time
        (``Tx.stream``), so memory holds a page whatever the batch's size.
        Nothing is handed over (0) if there is no such batch.

        Should the connection be lost part-way, the rest cannot be read from
        the same snapshot: the backend reads the batch again from a new one,
        and calls ``again`` first, which must undo what ``sink`` did with the
        rows it had. Without ``again``, ``StoreUnavailable`` instead: ``sink``
        never sees a row twice."""
        handed = 0

        def read(tx: Tx) -> int:
            nonlocal handed
            if handed:  # a backend's try again, on a new connection
                if again is None:
                    raise StoreUnavailable(
                        f"the connection to the store was lost part-way through batch "
                        f"{batch!r}, and the rest cannot be read from the same moment; "
                        "export it again"
                    )
                again()
                handed = 0
            for part in sqlmove.BATCH_PARTS:
                name, row_of = part.table.name, _row_reader(part.table)
                for row in tx.stream(part.select, (batch,)):
                    sink(name, row_of(row))
                    handed += 1
            return handed

        return self._snapshot(read)

    def import_rows(self, rows: Iterable[tuple[str, Mapping[str, Any]]]) -> None:
        """Insert ``rows`` (as ``export_rows`` gives them) in one transaction: all
        of them, or none. A key the store assigns (a conversation's) is given
        anew, and the rows after it that refer to it get the new one. A value may
        also be in its text form (a time as ISO text) or, from an old export, in
        its stored form (integer microseconds, 0 or 1).

        ``rows`` is read as it is inserted, a chunk at a time, so it may be a
        stream that never fits in memory (``cairn.portable`` passes an export
        file's reader). A backend that runs the transaction again after a lost
        connection reads ``rows`` again from the start: each iteration must give
        the same rows (a list does)."""
        with self._writing():
            self._atomically_once(
                lambda tx: self._insert_all(rows, tx), lambda tx: self._imported(rows, tx)
            )
        self._after_bulk_change(None)

    def _insert_all(self, rows: Iterable[tuple[str, Mapping[str, Any]]], tx: Tx) -> bool:
        """Every row of ``rows`` inserted through ``tx``; the given keys this store
        replaced are kept on disk (``Scratch``), for a batch may have very many."""
        keys = {name: Scratch() for name, identity in _IDENTITY.items() if identity is not None}
        try:
            inserts = _Inserts(self, tx, keys)
            for table_name, row in rows:
                inserts.add(table_name, row)
            inserts.flush()
        finally:
            for scratch in keys.values():
                scratch.close()
        return True

    def _imported(self, rows: Iterable[tuple[str, Mapping[str, Any]]], tx: Tx) -> bool | None:
        """True if the first of ``rows`` is in the store as given: an import is
        all or none, so an import run again after its answer was lost finds it
        made (and would otherwise fail on its own rows as duplicates)."""
        first = next(iter(rows), None)
        if first is None:
            return None
        table_name, row = first
        table = _TABLES[table_name]
        # Compared as given: the plain columns (not a key the store assigns, nor
        # a value whose stored form is not the given one's).
        columns = [c for c in table.written if c.refers_to is None and c.kind in _PLAIN]
        given = [c for c in columns if row[c.name] is not None]
        null = [c.name for c in columns if row[c.name] is None]
        look = sqlmove.find_row(table, [c.name for c in given], null)
        found = tx.exec(look, [self._param(c, row[c.name], {}) for c in given]).rows
        return True if found else None

    def _param(self, column: Column, value: Any, keys: Keys) -> Any:
        """A value of ``column`` in a row to import, as a parameter."""
        if column.refers_to is not None:
            known = keys.get(column.refers_to)
            mapped = None if known is None else known.get(value)
            if mapped is None:
                raise ValueError(
                    f"a row refers to {column.refers_to} {value!r}, which no row before it has"
                )
            value = mapped[0]
        if value is None:
            return None
        if column.kind == "time":
            return self._ts(sql.time_of(value))
        if column.kind == "micros":  # export version 1 held the stored integer itself
            return value if isinstance(value, int) else sql.micros_of(from_iso(value))
        if column.kind == "packed":
            return sql.pack_content(value)
        if column.kind == "bool":  # export version 1 held the stored 0 or 1
            return int(bool(value))
        if column.kind == "real":
            return float(value)
        return value

    def tasks_present(self, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` (a page of them: up to ``TASKS_PER_LOOK``) that are
        ids of tasks in the store, in one query."""
        if not ids:
            return set()
        return {str(row[0]) for row in self._exec(sqlmove.tasks_among(len(ids)), ids).rows}

    def batch_names(self) -> list[str]:
        """Every batch's name, oldest first."""
        return [str(row[0]) for row in self._exec(sqlmove.ALL_BATCHES).rows]

    def batch_statuses(self, batch: str) -> list[StatusCount]:
        """The tasks of ``batch`` by status, each with the last one to finish."""
        rows = self._exec(sqlmove.BATCH_STATUS, (batch,)).rows
        return [StatusCount(str(s), int(n), sql.opt_time(t)) for s, n, t in rows]

    def delete_batch(self, batch: str) -> None:
        """Delete every row of ``batch``, children first, in one transaction."""

        def delete(tx: Tx) -> int:
            return sum(tx.exec(statement, (batch,)).rowcount for statement in sqlmove.PRUNE_BATCH)

        with self._writing():
            deleted = self._atomically(delete)
        self._after_bulk_change(deleted)

    def count_expired(self, batch: str, status: str, finished_before: datetime) -> int:
        """How many tasks of ``batch`` in ``status`` finished before ``finished_before``."""
        params = (batch, status, self._ts(finished_before))
        return int(self._exec(sqlmove.COUNT_EXPIRED, params).rows[0][0])

    def expire_tasks(self, batch: str, status: str, finished_before: datetime, limit: int) -> int:
        """Delete up to ``limit`` tasks of ``batch`` in ``status`` that finished
        before ``finished_before``, with every row of theirs, and the batch's row
        once no task is left, in one transaction that a small ``limit`` keeps
        short (retention runs beside claims). How many tasks went."""
        look = (batch, status, self._ts(finished_before), batch, limit)

        def expire(tx: Tx) -> int:
            ids = [str(row[0]) for row in tx.exec(sqlmove.EXPIRED_TASKS, look).rows]
            if ids:
                for statement in sqlmove.delete_tasks(len(ids)):
                    tx.exec(statement, ids)
                tx.exec(sqlmove.DROP_EMPTY_BATCH, (batch, batch))
            return len(ids)

        with self._writing():
            return self._atomically(expire)

    def meta_value(self, key: str) -> str | None:
        """The store's own note ``key`` (``cairn_meta``), if there is one."""
        rows = self._exec(sqlmove.META_VALUE, (key,)).rows
        return None if not rows else str(rows[0][0])

    def put_meta(self, key: str, value: str) -> None:
        """Write the store's own note ``key``."""
        with self._writing():
            self._exec(sqlmove.PUT_META, (key, value))

    def take_turn(self, key: str, due: str, then: str) -> bool:
        """Whether this caller takes the turn noted as ``key``: if the note is
        missing or at most ``due`` (text that sorts as time does), it becomes
        ``then`` and the turn is this caller's; otherwise another took it."""
        with self._writing():
            return self._exec(sqlmove.TAKE_TURN, (key, then, due)).rowcount == 1

    def blob_refs(self) -> Iterator[str]:
        """Every blob reference (``!blob:`` text) any record of the store holds."""
        for query, params in sqlmove.BLOB_REFERENCES:
            yield from sqlmove.ref_texts(row[0] for row in self._exec(query, params).rows)


class _Inserts:
    """An import's inserts, in file order: the rows of a table whose key the
    store assigns one by one (each new key is noted before a row refers to
    it), the others gathered into chunks of one table, each sent at once."""

    def __init__(self, store: SQLTransfer, tx: Tx, keys: Keys) -> None:
        self._store = store
        self._tx = tx
        self._keys = keys
        self._table = ""  # the table of the rows in ``_chunk``
        self._chunk: list[list[Any]] = []

    def add(self, table: str, row: Mapping[str, Any]) -> None:
        if self._chunk and (table != self._table or len(self._chunk) >= IMPORT_CHUNK):
            self.flush()
        param, keys = self._store._param, self._keys
        params = [
            row[c.name] if as_is else param(c, row[c.name], keys) for c, as_is in _WRITTEN[table]
        ]
        checksum = _CHECKSUMS[table]
        if checksum is not None:
            params.append(checksum(params))
        identity = _IDENTITY[table]
        if identity is None:
            self._table = table
            self._chunk.append(params)
            return
        new = self._tx.exec(_INSERTS[table], params)
        self._keys[table].put(row[identity.name], new.rows[0][0])

    def flush(self) -> None:
        if self._chunk:
            self._tx.exec_many(_INSERTS[self._table], self._chunk)
            self._chunk = []
