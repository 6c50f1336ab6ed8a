"""The admin side of the shared SQL store, part one: listings, views, operator
actions and the reporting queries (``cairn.store.admin.AdminStore``).

The SQL is in ``cairn.store.sqlviews`` (listings and operator actions) and
``cairn.store.sqlmetrics`` (reports); this module only runs it through the
backend's primitives (``cairn.store.sqlcore``) and turns rows into records.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from cairn.store import sql, sqlmetrics, sqlviews
from cairn.store.records import (
    BatchSummary,
    ConversationSummary,
    OperationRecord,
    RecordedCall,
    ScheduleRecord,
    TaskRecord,
)
from cairn.store.reports import (
    BatchSpan,
    OpTotals,
    RunningTask,
    StepInFlight,
    StepTotals,
    TaskQuery,
    TaskTotals,
    Window,
)
from cairn.store.sqlcore import Own, SQLCore
from cairn.store.sqlgates import key_held


class SQLAdmin(SQLCore):
    """Listings, views, operator actions and reports, over the primitives."""

    # -- tasks and batches -----------------------------------------------------------
    def workers_seen(self, since: datetime) -> list[tuple[str, str]]:
        rows = self._exec(sqlviews.WORKERS_SEEN, (self._ts(since),)).rows
        return [(str(owner), str(versions)) for owner, versions in rows]

    def running_tasks(self, batch: str | None) -> list[TaskRecord]:
        if batch is None:
            rows = self._exec(sqlviews.RUNNING_ALL).rows
        else:
            rows = self._exec(sqlviews.RUNNING_OF_BATCH, (batch,)).rows
        return [sql.task_record(r) for r in rows]

    def list_tasks(
        self,
        *,
        batch: str | None = None,
        status: str | None = None,
        limit: int | None = None,
        query: TaskQuery | None = None,
    ) -> Iterator[TaskRecord]:
        if query is None:
            query = TaskQuery(status=status, batch=batch, include_internal=True)
        elif batch is not None or status is not None:
            raise ValueError("give list_tasks a query, or batch and status, not both")
        # Keyset pages: never a whole table in memory, and no cursor held open
        # between pages, so a caller may write while iterating.
        after, left = 0, limit
        while left is None or left > 0:
            size = sqlviews.PAGE if left is None else min(sqlviews.PAGE, left)
            rows = self._found(query, None, after, size, newer=True)
            for _, task in rows:
                yield task
            if len(rows) < size:
                return
            after = rows[-1][0]
            left = None if left is None else left - len(rows)

    def batch_summaries(self, name: str | None = None) -> list[BatchSummary]:
        if name is None:
            return self._summaries("", ())
        return self._summaries(" WHERE b.name = ?", (name,))

    def _summaries(self, where: str, params: Sequence[Any]) -> list[BatchSummary]:
        summaries: dict[str, BatchSummary] = {}
        for row in self._exec(sqlviews.BATCH_SUMMARIES.format(where=where), params).rows:
            known = summaries.get(row[0])
            if known is None:
                known = BatchSummary(row[0], row[1], sql.time_of(row[2]), {}, None, None)
            started = [t for t in (known.first_started_at, sql.opt_time(row[5])) if t]
            finished = [t for t in (known.last_finished_at, sql.opt_time(row[6])) if t]
            counts = dict(known.counts)
            if row[3] is not None:
                counts[row[3]] = row[4]
            summaries[row[0]] = BatchSummary(
                known.name,
                known.task_name,
                known.created_at,
                counts,
                min(started, default=None),
                max(finished, default=None),
            )
        return list(summaries.values())

    def find_tasks(
        self, query: TaskQuery, *, below: int | None = None, above: int | None = None, size: int
    ) -> list[tuple[int, TaskRecord]]:
        newer = above is not None and below is None
        found = self._found(query, below, above, size, newer=newer)
        return found[::-1] if newer else found

    def _found(
        self, query: TaskQuery, below: int | None, above: int | None, size: int, *, newer: bool
    ) -> list[tuple[int, TaskRecord]]:
        """Up to ``size`` tasks between the positions, ascending if ``newer``."""
        where, params = sqlviews.task_query_filter(query, self._ts, self.case_blind_like)
        if below is not None:
            where.append("pos < ?")
            params.append(below)
        if above is not None:
            where.append("pos > ?")
            params.append(above)
        rows = self._exec(sqlviews.find_tasks(where, newer=newer), (*params, size)).rows
        return [(int(r[0]), sql.task_record(r[1:])) for r in rows]

    def count_tasks(self, query: TaskQuery, *, up_to: int | None = None) -> int:
        where, params = sqlviews.task_query_filter(query, self._ts, self.case_blind_like)
        clause = " AND ".join(where) or "1 = 1"
        if up_to is None:
            statement = sqlviews.COUNT_TASKS.format(where=clause)
            return int(self._exec(statement, params).rows[0][0])
        statement = sqlviews.COUNT_TASKS_UP_TO.format(where=clause)
        return int(self._exec(statement, (*params, up_to)).rows[0][0])

    def error_groups(self, query: TaskQuery, limit: int) -> list[tuple[str, int]]:
        where, params = sqlviews.task_query_filter(query, self._ts, self.case_blind_like)
        statement = sqlviews.ERROR_GROUPS.format(
            where=" AND ".join(where) or "1 = 1", find=self.find_text_function
        )
        counts: dict[str, int] = {}
        for head, n in self._exec(statement, (*params, limit)).rows:
            kind = sqlviews.error_type_of_head(None if head is None else str(head))
            counts[kind] = counts.get(kind, 0) + int(n)
        return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))

    def failed_since(self, since: datetime, limit: int) -> list[TaskRecord]:
        statement = sqlmetrics.FAILED_SINCE.format(columns=sql.TASK_COLUMNS)
        rows = self._exec(statement, (self._ts(since), limit)).rows
        return [sql.task_record(row) for row in rows]

    def metric_hours(self, since: datetime) -> list[tuple[datetime, int, int, float]]:
        rows = self._exec(sqlmetrics.METRIC_HOURS_SINCE, (self._ts(since),)).rows
        return [(sql.time_of(h), int(n), int(failed), float(cost)) for h, n, failed, cost in rows]

    def calls_finished_between(
        self, start: datetime, end: datetime
    ) -> list[tuple[datetime, RecordedCall]]:
        params = (self._ts(start), self._ts(end))
        rows = self._exec(sqlmetrics.CALLS_FINISHED_BETWEEN, params).rows
        return [(sql.time_of(r[0]), RecordedCall(*r[1:])) for r in rows]

    def finishes_between(self, start: datetime, end: datetime) -> list[tuple[datetime, str]]:
        params = (self._ts(start), self._ts(end))
        rows = self._exec(sqlmetrics.FINISHES_BETWEEN, params).rows
        return [(sql.time_of(at), str(status)) for at, status in rows]

    def save_metric_hours(self, hours: Sequence[tuple[datetime, int, int, float]]) -> None:
        with self._writing():
            for hour, done, failed, cost in hours:
                self._exec(sqlmetrics.SAVE_METRIC_HOUR, (self._ts(hour), done, failed, cost))

    def failed_steps(self, task_ids: Sequence[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        for start in range(0, len(task_ids), 500):
            ids = list(task_ids[start : start + 500])
            statement = sqlviews.FAILED_STEPS.format(ids=", ".join("?" for _ in ids))
            for task_id, name in self._exec(statement, ids).rows:
                found[str(task_id)] = str(name)
        return found

    def child_ids(self, task_id: str) -> list[str]:
        return [str(r[0]) for r in self._exec(sqlviews.CHILD_IDS, (task_id,)).rows]

    def batch_page(
        self,
        *,
        search: str | None = None,
        below: tuple[datetime, str] | None = None,
        above: tuple[datetime, str] | None = None,
        size: int,
    ) -> list[BatchSummary]:
        where, params = sqlviews.batch_search(search)
        for clause, edge in ((sqlviews.BATCH_BEFORE, below), (sqlviews.BATCH_AFTER, above)):
            if edge is not None:
                where.append(clause)
                params += [self._ts(edge[0]), self._ts(edge[0]), edge[1]]
        newer = above is not None and below is None
        statement = sqlviews.BATCH_NAMES_PAGE.format(
            where=" AND ".join(where) or "1 = 1", order="ASC" if newer else "DESC"
        )
        names = [str(r[0]) for r in self._exec(statement, (*params, size)).rows]
        if not names:
            return []
        marks = ", ".join("?" for _ in names)
        by_name = {s.name: s for s in self._summaries(f" WHERE b.name IN ({marks})", names)}
        ordered = [by_name[name] for name in names]
        return ordered[::-1] if newer else ordered

    def count_batches(self, search: str | None = None) -> int:
        where, params = sqlviews.batch_search(search)
        statement = sqlviews.COUNT_BATCHES.format(where=" AND ".join(where) or "1 = 1")
        return int(self._exec(statement, params).rows[0][0])

    def cancel_task(self, task_id: str, now: datetime) -> bool:
        stamp = self._ts(now)
        own = (sqlviews.CANCELLED_AT, (task_id, stamp))
        with self._writing():
            return self._write_once(sqlviews.CANCEL, (stamp, stamp, task_id), own).rowcount == 1

    def retry_task(self, task_id: str, now: datetime) -> bool:
        stamp = self._ts(now)
        own = (sqlviews.RETRIED_AT, (task_id, stamp))
        with self._writing(), key_held(f"retry task {task_id!r}"):
            return self._write_once(sqlviews.RETRY, (stamp, task_id), own).rowcount == 1

    # Setting a priority is the same change made twice: a statement run again
    # after a lost answer does no harm, so no read of what it left is needed.
    def set_priority(self, task_id: str, priority: int, now: datetime) -> bool:
        params = (priority, self._ts(now), task_id)
        with self._writing():
            return self._exec(sqlviews.SET_PRIORITY, params).rowcount == 1

    def set_batch_priority(self, batch: str, priority: int, now: datetime) -> int:
        params = (priority, self._ts(now), batch)
        with self._writing():
            changed = self._exec(sqlviews.SET_BATCH_PRIORITY, params).rowcount
        self._after_bulk_change(changed)
        return changed

    def cancel_batch(self, batch: str, status: str, now: datetime) -> list[str]:
        stamp = self._ts(now)
        own = (sqlviews.BATCH_CANCELLED_AT, (batch, stamp))
        return self._batch_change(sqlviews.CANCEL_BATCH, (stamp, stamp, batch, status), own)

    def retry_batch(self, batch: str, status: str, now: datetime) -> list[str]:
        stamp = self._ts(now)
        own = (sqlviews.BATCH_RETRIED_AT, (batch, stamp))
        with key_held(f"retry the {status} tasks of batch {batch!r}"):
            return self._batch_change(sqlviews.RETRY_BATCH, (stamp, batch, status), own)

    def _batch_change(self, statement: str, params: tuple[Any, ...], own: Own) -> list[str]:
        """The ids of the tasks one batch-wide change moved, in enqueue order."""
        with self._writing():
            rows = self._write_once(statement, params, own).rows
        self._after_bulk_change(len(rows))
        return [str(task_id) for task_id, _ in sorted(rows, key=lambda row: int(row[1]))]

    # -- operations --------------------------------------------------------------------
    def resolve_operation(
        self,
        scope: str,
        key: str,
        status: str,
        *,
        result: str | None,
        permanent: bool,
        now: datetime,
    ) -> bool:
        stamp = self._ts(now)
        completed_at = stamp if status == "completed" else None
        error = sqlviews.RESOLVED_AS_FAILED if status == "failed" else None
        checksum = sql.op_checksum(key, result)
        params = (status, result, checksum, int(permanent), completed_at, stamp, error, scope, key)
        own = (sqlviews.RESOLVED_AT, (scope, key, status, stamp))
        with self._writing():
            return self._write_once(sqlviews.RESOLVE_OP, params, own).rowcount == 1

    def list_operations(
        self,
        *,
        prefix: str | None = None,
        since: datetime | None = None,
        task_id: str | None = None,
        statuses: tuple[str, ...] | None = None,
        limit: int | None = None,
    ) -> Iterator[OperationRecord]:
        stamp = None if since is None else self._ts(since)
        where, params = sqlviews.operation_filter(prefix, stamp, task_id, statuses)
        yield from self._operation_pages(where, params, limit)

    def _operation_pages(
        self, where: list[str], params: list[Any], limit: int | None
    ) -> Iterator[OperationRecord]:
        after: tuple[Any, ...] | None = None
        left = limit
        while left is None or left > 0:
            size = sqlviews.PAGE if left is None else min(sqlviews.PAGE, left)
            clauses = list(where)
            page_params = list(params)
            if after is not None:
                clauses.append(sqlviews.OP_AFTER)
                page_params += list(after)
            rows = self._exec(sqlviews.operation_page(clauses), (*page_params, size)).rows
            for row in rows:
                yield sql.op_record(row)
            if len(rows) < size:
                return
            last = rows[-1]
            after = (last[10], last[0], last[1])
            left = None if left is None else left - len(rows)

    def operation_call_counts(self) -> tuple[int, int]:
        row = self._exec(sqlviews.OP_CALL_COUNTS).rows[0]
        return int(row[0]), int(row[1])

    # -- conversations, recorded calls, schedules ------------------------------------
    def conversation_summaries(self, task_id: str) -> list[ConversationSummary]:
        rows = self._exec(sqlviews.CONVERSATION_SUMMARIES, (task_id,)).rows
        return [
            ConversationSummary(task_id, r[0], int(r[1]), int(r[2]), int(r[3]), int(r[4]))
            for r in rows
        ]

    def recorded_calls(
        self, *, batch: str | None = None, task_id: str | None = None
    ) -> Iterator[RecordedCall]:
        where, params = sqlviews.calls_filter(batch, task_id)
        for r in self._exec(sqlviews.RECORDED_CALLS.format(filter=where), params).rows:
            yield RecordedCall(r[0], r[1], r[2], r[3], r[4], r[5], r[6])

    def list_schedules(self) -> list[ScheduleRecord]:
        return [sql.schedule_record(row) for row in self._exec(sqlviews.LIST_SCHEDULES).rows]

    # -- reports (cairn.observe) -----------------------------------------------------
    def _report(self, statement: str, window: Window) -> list[tuple[Any, ...]]:
        """The rows of a report ``statement`` over the tasks of ``window``."""
        where, params = sqlmetrics.window_filter(window, self._ts)
        return self._exec(statement.format(where=where), params).rows

    def task_totals(self, window: Window) -> TaskTotals:
        rows = self._report(sqlmetrics.TASKS_BY_STATUS, window)
        by_status = {str(status): int(n) for status, n in rows}
        row = self._report(sqlmetrics.TASK_TOTALS, window)[0]
        return TaskTotals(by_status, int(row[0]), int(row[1]), int(row[2]), int(row[3]))

    def failed_task_errors(self, window: Window) -> Iterator[str | None]:
        for (error,) in self._report(sqlmetrics.FAILED_TASK_ERRORS, window):
            yield error

    def batch_spans(self, window: Window) -> list[BatchSpan]:
        return [
            BatchSpan(r[0], int(r[1]), int(r[2]), sql.opt_time(r[3]), sql.opt_time(r[4]))
            for r in self._report(sqlmetrics.BATCH_SPANS, window)
        ]

    def step_totals(self, window: Window) -> StepTotals:
        row = self._report(sqlmetrics.STEP_TOTALS, window)[0]
        return StepTotals(*(int(v) for v in row))

    def step_durations(self, window: Window) -> Iterator[tuple[str, datetime, datetime]]:
        for name, started, finished in self._report(sqlmetrics.STEP_DURATIONS, window):
            yield str(name), sql.time_of(started), sql.time_of(finished)

    def task_summary(self, window: Window) -> tuple[TaskTotals, list[BatchSpan]]:
        by_status: dict[str, int] = {}
        totals = [0, 0, 0, 0]  # interrupted, of them completed, interruptions, retries
        batches: dict[str, list[Any]] = {}  # tasks, unfinished, first start, last finish
        for batch, status, n, hit, interruptions, retries, first, last in self._report(
            sqlmetrics.TASK_SUMMARY, window
        ):
            by_status[status] = by_status.get(status, 0) + int(n)
            totals[0] += int(hit)
            totals[1] += int(hit) if status == "completed" else 0
            totals[2] += int(interruptions)
            totals[3] += int(retries)
            if batch is not None:
                span = batches.setdefault(batch, [0, 0, None, None])
                span[0] += int(n)
                span[1] += int(n) if status in ("pending", "running", "waiting") else 0
                span[2] = _earliest(span[2], sql.opt_time(first))
                span[3] = _latest(span[3], sql.opt_time(last))
        spans = [BatchSpan(name, *batches[name]) for name in sorted(batches)]
        return TaskTotals(by_status, *totals), spans

    def finished_steps(
        self, window: Window, since: datetime | None
    ) -> Iterator[tuple[str, int, str, str, int, datetime, datetime]]:
        where, params = sqlmetrics.window_filter(window, self._ts)
        statement = sqlmetrics.FINISHED_STEPS.format(where=where)
        if since is not None:
            statement += " AND s.finished_at >= ?"
            params.append(self._ts(since))
        for tid, seq, kind, name, attempts, started, finished in self._exec(statement, params).rows:
            yield (
                str(tid), int(seq), str(kind), str(name), int(attempts),
                sql.time_of(started), sql.time_of(finished),
            )  # fmt: skip

    def suspect_reruns(self, window: Window) -> tuple[int, int]:
        row = self._report(sqlmetrics.SUSPECT_RERUNS, window)[0]
        return int(row[0]), int(row[1])

    def step_errors(self, window: Window) -> Iterator[str | None]:
        for (error,) in self._report(sqlmetrics.STEP_ERRORS, window):
            yield error

    def op_totals(self, window: Window) -> OpTotals:
        where, params = sqlmetrics.op_filter(window, self._ts)
        row = self._exec(sqlmetrics.OP_TOTALS.format(where=where), params).rows[0]
        return OpTotals(int(row[0]), int(row[1]), int(row[2]))

    def running_checkpoints(self) -> list[RunningTask]:
        found = []
        for row in self._exec(sqlmetrics.RUNNING).rows:
            tid, batch, name, owner, started, updated, last_finish, last_step = row[:8]
            moments = [sql.time_of(updated)]
            moments += [sql.time_of(m) for m in (started, last_finish) if m is not None]
            now = _in_flight(row[8:12])
            item_key, args, codec = row[12:15]
            found.append(
                RunningTask(
                    tid, batch, name, owner, max(moments), last_step, now,
                    item_key=item_key, args=args, codec=str(codec),
                )
            )  # fmt: skip
        return found

    def steps_in_flight(self, task_ids: Sequence[str]) -> dict[str, StepInFlight]:
        found: dict[str, StepInFlight] = {}
        for start in range(0, len(task_ids), 500):
            ids = list(task_ids[start : start + 500])
            statement = sqlmetrics.IN_FLIGHT.format(ids=", ".join("?" for _ in ids))
            for row in self._exec(statement, ids).rows:
                now = _in_flight(row[1:])
                if now is not None:
                    found[str(row[0])] = now
        return found

    def open_alerts(self, alert_task: str, raised: str, cleared: str) -> list[str]:
        size = len(raised)
        params = [size + 1, alert_task, size, raised, cleared, size + 1]
        return [str(r[0]) for r in self._exec(sqlmetrics.OPEN_ALERTS, params).rows]


def _in_flight(row: Sequence[Any]) -> StepInFlight | None:
    """``IN_FLIGHT_COLUMNS`` read: the step in flight, or None (none noted, or
    it has ended since)."""
    seq, name, started, current = row
    if seq is None or name is None or started is None or not current:
        return None
    return StepInFlight(int(seq), str(name), sql.time_of(started))


def _earliest(a: datetime | None, b: datetime | None) -> datetime | None:
    return b if a is None else a if b is None else min(a, b)


def _latest(a: datetime | None, b: datetime | None) -> datetime | None:
    return b if a is None else a if b is None else max(a, b)
