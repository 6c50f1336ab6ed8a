"""The admin side of the shared SQL store, part two: a batch's rows read out and
written in (``cairn export`` / ``import``), finished batches deleted (``cairn
prune``), and the blob references every record holds (``cairn gc``).

The SQL is in ``cairn.store.sqlmove``, built from the table descriptions; this
module runs it through the backend's primitives (``cairn.store.sqlcore``) and
converts values between their stored form and the form a record holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from cairn.clock import from_iso
from cairn.errors import StoreUnavailable
from cairn.store import sql, sqlmove
from cairn.store.reports import StatusCount
from cairn.store.sqlcore import SQLCore, Tx
from cairn.store.tables import Column, Table

_TABLES: dict[str, Table] = {part.table.name: part.table for part in sqlmove.BATCH_PARTS}
# The kinds of column whose value an equality finds as given.
_PLAIN = frozenset({"text", "integer", "time"})
_INSERTS: dict[str, str] = {name: sqlmove.insert(table) for name, table in _TABLES.items()}


# What an export hands each row to as it reads it: (table, {column: value}).
RowSink = Callable[[str, dict[str, Any]], None]


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

    def import_rows(self, rows: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        """Insert ``rows`` (as ``export_rows`` gives them) in one transaction: all
        of them, or none. A key the store assigns (a conversation's) is given
        anew, and the rows after it that refer to it get the new one. A value may
        also be in its text form (a time as ISO text) or, from an old export, in
        its stored form (integer microseconds, 0 or 1)."""

        def write(tx: Tx) -> bool:
            # For each table whose key the store assigns: the given key -> this store's.
            keys: dict[str, dict[Any, Any]] = {}
            for table_name, row in rows:
                table = _TABLES[table_name]
                params = [self._param(column, row[column.name], keys) for column in table.written]
                new = tx.exec(_INSERTS[table_name], params)
                identity = table.identity
                if identity is not None:
                    keys.setdefault(table_name, {})[row[identity.name]] = new.rows[0][0]
            return True

        with self._writing():
            self._atomically_once(write, lambda tx: self._imported(rows, tx))

    def _imported(self, rows: Sequence[tuple[str, Mapping[str, Any]]], tx: Tx) -> bool | None:
        """True if the first of ``rows`` is in the store as given: an import is
        all or none, so an import run again after its answer was lost finds it
        made (and would otherwise fail on its own rows as duplicates)."""
        if not rows:
            return None
        table_name, row = rows[0]
        table = _TABLES[table_name]
        # Compared as given: the plain columns (not a key the store assigns, nor
        # a value whose stored form is not the given one's).
        columns = [c for c in table.written if c.refers_to is None and c.kind in _PLAIN]
        given = [c for c in columns if row[c.name] is not None]
        null = [c.name for c in columns if row[c.name] is None]
        look = sqlmove.find_row(table, [c.name for c in given], null)
        found = tx.exec(look, [self._param(c, row[c.name], {}) for c in given]).rows
        return True if found else None

    def _param(self, column: Column, value: Any, keys: dict[str, dict[Any, Any]]) -> Any:
        """A value of ``column`` in a row to import, as a parameter."""
        if column.refers_to is not None:
            known = keys.get(column.refers_to, {})
            if value not in known:
                raise ValueError(
                    f"a row refers to {column.refers_to} {value!r}, which no row before it has"
                )
            value = known[value]
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

    def batch_names(self) -> list[str]:
        """Every batch's name, oldest first."""
        return [str(row[0]) for row in self._exec(sqlmove.ALL_BATCHES).rows]

    def batch_statuses(self, batch: str) -> list[StatusCount]:
        """The tasks of ``batch`` by status, each with the last one to finish."""
        rows = self._exec(sqlmove.BATCH_STATUS, (batch,)).rows
        return [StatusCount(str(s), int(n), sql.opt_time(t)) for s, n, t in rows]

    def delete_batch(self, batch: str) -> None:
        """Delete every row of ``batch``, children first, in one transaction."""

        def delete(tx: Tx) -> None:
            for statement in sqlmove.PRUNE_BATCH:
                tx.exec(statement, (batch,))

        with self._writing():
            self._atomically(delete)

    def blob_refs(self) -> Iterator[str]:
        """Every blob reference (``!blob:`` text) any record of the store holds."""
        for query, params in sqlmove.BLOB_REFERENCES:
            yield from sqlmove.ref_texts(row[0] for row in self._exec(query, params).rows)
