"""The admin side of the shared SQL store, part three: reruns from a step and
their lineage, a cancel that reaches a task's children, and the audit trail.

The SQL is in ``cairn.store.sqlforks``; this module runs it through the
backend's primitives (``cairn.store.sqlcore``) and turns rows into records.
How a rerun keeps the old run readable, and why so, is in docs/architecture.md
("A rerun from a step").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from cairn.store import sql, sqlforks, tables
from cairn.store.entries import entry_of, entry_text
from cairn.store.records import AuditRecord, StepRecord, TaskRecord, TaskRunRecord
from cairn.store.sqlcore import SQLCore, Tx
from cairn.store.sqlgates import key_held

task_run_record: Callable[[tuple[Any, ...]], TaskRunRecord] = sql.record_reader(
    "task_run_record", tables.TASK_RUNS, TaskRunRecord
)
audit_record: Callable[[tuple[Any, ...]], AuditRecord] = sql.record_reader(
    "audit_record", tables.AUDIT, AuditRecord
)
# A generation of children is cancelled this many parents at a time.
_PARENTS_AT_ONCE = 200


def _marks(count: int) -> str:
    return ", ".join("?" for _ in range(count))


class SQLRuns(SQLCore):
    """Reruns, lineage, cascading cancels and the audit trail, over the primitives."""

    # -- a rerun from a step ---------------------------------------------------------
    def fork_task(self, task_id: str, run: int, from_seq: int, now: datetime, by: str) -> bool:
        stamp = self._ts(now)

        def fork(tx: Tx) -> bool:
            found = tx.exec(sqlforks.FORK_READ.format(lock=self.row_lock_clause), (task_id,)).rows
            if not found or int(found[0][0]) != run:
                return False
            if tx.exec(sqlforks.FORK_TASK, (stamp, task_id, run)).rowcount != 1:
                return False
            _, status, result, error, attempts, started, finished = found[0]
            tx.exec(
                sqlforks.INSERT_TASK_RUN,
                (task_id, run, from_seq, status, result, error, attempts, started, finished,
                 stamp, by),
            )  # fmt: skip
            history = sql.history_of(
                task_id,
                tx.exec(sql.LOAD_OP_HISTORY, (task_id,)).rows,
                tx.exec(sql.LOAD_HISTORY, (task_id,)).rows,
                checked=False,  # moved aside, not replayed: a corrupt one may go too
            )
            superseded = [
                (task_id, run, seq, entry.kind, entry.name, entry_text(entry))
                for seq, entry in sorted(history.items())
                if seq >= from_seq
            ]
            tx.exec_many(sqlforks.INSERT_SUPERSEDED, superseded)
            tx.exec(sqlforks.DROP_ENTRIES, (task_id, from_seq))
            return True

        def forked_before(tx: Tx) -> bool | None:
            return True if tx.exec(sqlforks.OWN_FORK, (task_id, run, stamp)).rows else None

        with self._writing(), key_held(f"rerun task {task_id!r}"):
            return self._atomically_once(fork, forked_before)

    def task_runs(self, task_id: str) -> list[TaskRunRecord]:
        return [task_run_record(r) for r in self._exec(sqlforks.TASK_RUNS, (task_id,)).rows]

    def superseded_entries(self, task_id: str, since_run: int = 1) -> list[tuple[int, StepRecord]]:
        rows = self._exec(sqlforks.SUPERSEDED, (task_id, since_run)).rows
        return [(int(run), entry_of(text)) for run, text in rows]

    def forked_tasks(self, batch: str | None) -> list[TaskRecord]:
        where, params = ("batch = ?", (batch,)) if batch is not None else ("1 = 1", ())
        rows = self._exec(sqlforks.FORKED_TASKS.format(filter=where), params).rows
        return [sql.task_record(r) for r in rows]

    # -- a cancel that reaches the task's children -------------------------------------
    def cancel_family(self, task_id: str, now: datetime) -> list[str]:
        stamp = self._ts(now)

        def cancel(tx: Tx) -> list[str]:
            if tx.exec(sqlforks.CANCEL_ROOT, (stamp, stamp, task_id)).rowcount != 1:
                return []
            return [task_id, *_generations(tx, task_id, sqlforks.CANCEL_CHILDREN, (stamp, stamp))]

        def cancelled_before(tx: Tx) -> list[str] | None:
            if not tx.exec(sqlforks.OWN_CANCEL, (task_id, stamp)).rows:
                return None
            return [task_id, *_generations(tx, task_id, sqlforks.CANCELLED_WITH, (), (stamp,))]

        with self._writing():
            cancelled = self._atomically_once(cancel, cancelled_before)
        self._after_bulk_change(len(cancelled))
        return cancelled

    # -- the audit trail ----------------------------------------------------------------
    def begin_audit(
        self, at: datetime, actor: str, action: str, target: str, detail: str | None
    ) -> int:
        stamp = self._ts(at)
        params = (stamp, actor, action, target, detail)
        own = (sqlforks.OWN_AUDIT, (stamp, actor, action, target))
        with self._writing():
            return int(self._write_once(sqlforks.BEGIN_AUDIT, params, own).rows[0][0])

    def end_audit(self, entry: int, count: int | None, outcome: str | None) -> None:
        with self._writing():
            self._exec(sqlforks.END_AUDIT, (count, outcome, entry))

    def audit_page(self, before: int | None, size: int) -> list[AuditRecord]:
        edge = before if before is not None else 2**62
        rows = self._exec(sqlforks.AUDIT_PAGE, (edge, size)).rows
        return [audit_record(r) for r in rows]


def _generations(
    tx: Tx,
    root: str,
    change: str,
    before: Sequence[Any],
    after: Sequence[Any] = (),
) -> list[str]:
    """Apply ``change`` (a statement over the children of ``{ids}``, with
    ``before`` and ``after`` around their ids) to each generation below ``root``
    in turn, each a statement of its own: on PostgreSQL each then sees the
    children committed up to its start, which a child's insert made while its
    parent was not yet cancelled (it held the parent's row) has been. The ids
    the statements returned, generation by generation, in enqueue order."""
    changed: list[str] = []
    parents = [root]
    while parents:
        children: list[str] = []
        for start in range(0, len(parents), _PARENTS_AT_ONCE):
            chunk = parents[start : start + _PARENTS_AT_ONCE]
            ids = _marks(len(chunk))
            rows = tx.exec(change.format(ids=ids), (*before, *chunk, *after)).rows
            changed += [str(r[0]) for r in sorted(rows, key=lambda row: int(row[1]))]
            found = tx.exec(sqlforks.CHILDREN_OF.format(ids=ids), chunk).rows
            children += [str(r[0]) for r in found]
        parents = children
    return changed
