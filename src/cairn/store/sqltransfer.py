"""The admin side of the shared SQL store, part two: a batch's rows read out and
written in (``cairn export`` / ``import``), finished batches deleted (``cairn
prune``), and the blob references every record holds (``cairn gc``).

The SQL is in ``cairn.store.sqlmove``, built from the table descriptions; this
module runs it through the backend's primitives (``cairn.store.sqlcore``) and
converts values between their stored form and the form a record holds.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from cairn.clock import from_iso
from cairn.store import sql, sqlmove
from cairn.store.reports import StatusCount
from cairn.store.sqlcore import SQLCore, Tx
from cairn.store.tables import Column, Table

_TABLES: dict[str, Table] = {part.table.name: part.table for part in sqlmove.BATCH_PARTS}
# The kinds of column whose value an equality finds as given.
_PLAIN = frozenset({"text", "integer", "time"})
_INSERTS: dict[str, str] = {name: sqlmove.insert(table) for name, table in _TABLES.items()}


def _record_value(column: Column, value: Any) -> Any:
    """A stored value of ``column`` as a record holds it (``sql.value_reader``)."""
    read = sql.value_reader(column)
    return value if value is None or read is None else read(value)


class SQLTransfer(SQLCore):
    """Export, import, prune and blob references, over the primitives."""

    def export_rows(self, batch: str) -> list[tuple[str, dict[str, Any]]]:
        """Every row of ``batch`` as (table, {column: value}), tables in
        ``sqlmove.BATCH_PARTS`` order, values as a record holds them; read from
        one snapshot, so consistent while the batch runs (which it does not
        stop). Empty if no such batch."""

        def read(tx: Tx) -> list[tuple[str, dict[str, Any]]]:
            out: list[tuple[str, dict[str, Any]]] = []
            for part in sqlmove.BATCH_PARTS:
                columns = part.table.carried
                for row in tx.exec(part.select, (batch,)).rows:
                    pairs = zip(columns, row, strict=True)
                    out.append((part.table.name, {c.name: _record_value(c, v) for c, v in pairs}))
            return out

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
