"""Budgets in the shared SQL store: reserve before a model call, settle after,
park a task the budget refuses, raise a budget and wake what it parked.

A budget's spend is two numbers on its row (what settled calls used) plus the
permits of the calls running now (limits ``budget-usd:SCOPE`` and
``budget-tokens:SCOPE``), which the lease heartbeat renews as any permit. A
reservation is checked and taken under a lock on the budget's row, so two
workers can never both take the last of it. A settle deletes the permit and
adds what the call used to the row in one transaction (the delete's row count
says whether this try is the one that counts). A holder that dies keeps its
reservation counted: the provider may have billed its request.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from cairn.store import sql, tables
from cairn.store.records import BudgetRecord, BudgetRefused
from cairn.store.sqlcore import SQLCore, Tx

USD = "usd"
TOKENS = "tokens"
MEASURES = (USD, TOKENS)

BUDGET_COLUMNS = tables.BUDGETS.listed()
DECLARE_BUDGET = (
    "INSERT INTO budgets (scope, usd_nanos, tokens, warn_at, raised, updated_at) "
    "VALUES (?, ?, ?, ?, 0, ?) ON CONFLICT (scope) DO NOTHING"
)
LOCK_BUDGET = (
    "SELECT usd_nanos, tokens, raised, spent_usd_nanos, spent_tokens "
    "FROM budgets WHERE scope = ?{lock}"
)
HELD = "SELECT COALESCE(SUM(amount), 0) FROM permits WHERE limit_name = ?"
SETTLE_DROP = "DELETE FROM permits WHERE limit_name = ? AND permit = ?"
SETTLE_SPEND = (
    "UPDATE budgets SET spent_usd_nanos = spent_usd_nanos + ?, "
    "spent_tokens = spent_tokens + ? WHERE scope = ?"
)
PARK = (
    "UPDATE tasks SET status = 'waiting', wake_at = NULL, owner = NULL, "
    "lease_expires_at = NULL, updated_at = ? WHERE id = ? AND fence = ? AND status = 'running'"
)
OWN_PARK = (
    "SELECT 1 FROM budget_parks p JOIN tasks t ON t.id = p.task_id "
    "WHERE p.task_id = ? AND p.parked_at = ? AND t.fence = ? AND t.owner IS NULL"
)
INSERT_PARK = (
    "INSERT INTO budget_parks (task_id, scope, parked_at, needed) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (task_id) DO UPDATE SET scope = excluded.scope, "
    "parked_at = excluded.parked_at, needed = excluded.needed"
)
RAISE = (
    "UPDATE budgets SET usd_nanos = COALESCE(?, usd_nanos), tokens = COALESCE(?, tokens), "
    "raised = raised + 1, warned_at = NULL, reached_at = NULL, updated_at = ? WHERE scope = ?"
)
# A park row outlives its wait when something else woke the task (a cancel):
# only the tasks still waiting are parked.
PARKED = (
    "SELECT p.task_id FROM budget_parks p JOIN tasks t ON t.id = p.task_id "
    "WHERE p.scope = ? AND t.status = 'waiting' ORDER BY p.task_id"
)
PARK_OF = (
    "SELECT p.scope FROM budget_parks p JOIN tasks t ON t.id = p.task_id "
    "WHERE p.task_id = ? AND t.status = 'waiting'"
)
WAKE_PARKED = (
    "UPDATE tasks SET status = 'pending', wake_at = NULL, updated_at = ? "
    "WHERE id = ? AND status = 'waiting'"
)
DROP_PARKS = "DELETE FROM budget_parks WHERE scope = ?"
GET_BUDGET = f"SELECT {BUDGET_COLUMNS} FROM budgets WHERE scope = ?"
BUDGETS_LIKE = f"SELECT {BUDGET_COLUMNS} FROM budgets WHERE scope LIKE ? ESCAPE '\\' ORDER BY scope"
MARK_ALERT = "UPDATE budgets SET {column} = ? WHERE scope = ? AND {column} IS NULL"
_ALERT_COLUMNS = {"warned": "warned_at", "reached": "reached_at"}


def budget_limit(measure: str, scope: str) -> str:
    """The limit name a budget's running reservations of ``measure`` are permits of."""
    return f"budget-{measure}:{scope}"


def _cap(value: Any) -> int | None:
    return None if value is None else int(value)


class SQLBudgets(SQLCore):
    """Budgets over the primitives (see the module doc)."""

    def declare_budget(
        self, scope: str, usd_nanos: int | None, tokens: int | None, warn_at: float, now: datetime
    ) -> None:
        with self._writing():
            self._exec(DECLARE_BUDGET, (scope, usd_nanos, tokens, warn_at, self._ts(now)))

    def reserve_budget(
        self,
        scopes: Sequence[str],
        permit: str,
        owner: str,
        task_id: str,
        usd_nanos: int,
        tokens: int,
        now: datetime,
        lease_until: datetime,
    ) -> BudgetRefused | tuple[str, ...]:
        lock = LOCK_BUDGET.format(lock=self.row_lock_clause)
        need = {USD: usd_nanos, TOKENS: tokens}

        def reserve(tx: Tx) -> BudgetRefused | tuple[str, ...]:
            charged: list[str] = []
            for scope in scopes:
                rows = tx.exec(lock, (scope,)).rows
                if not rows:
                    continue
                usd_cap, token_cap, raised, spent_usd, spent_tokens = rows[0]
                first = budget_limit(USD, scope)
                if tx.exec(sql.HAS_PERMIT, (first, permit)).rows:
                    charged.append(scope)  # a retried transaction whose first try committed
                    continue
                caps = {USD: _cap(usd_cap), TOKENS: _cap(token_cap)}
                spent = {USD: int(spent_usd), TOKENS: int(spent_tokens)}
                for measure in MEASURES:
                    cap = caps[measure]
                    if cap is None:
                        continue
                    held = int(tx.exec(HELD, (budget_limit(measure, scope),)).rows[0][0])
                    if spent[measure] + held + need[measure] > cap:
                        total = spent[measure] + held
                        return BudgetRefused(scope, measure, total, cap, int(raised))
                charged.append(scope)
            for scope in charged:
                for measure in MEASURES:
                    params = (
                        budget_limit(measure, scope), permit, owner, task_id, self._ts(now),
                        self._ts(lease_until), need[measure],
                    )  # fmt: skip
                    tx.exec(sql.INSERT_PERMIT, params)
            return tuple(charged)

        with self._writing():
            return self._atomically(reserve)

    def settle_budget(
        self, scopes: Sequence[str], permit: str, usd_nanos: int, tokens: int
    ) -> None:
        def settle(tx: Tx) -> None:
            for scope in scopes:
                dropped = 0
                for measure in MEASURES:
                    dropped += tx.exec(SETTLE_DROP, (budget_limit(measure, scope), permit)).rowcount
                if dropped:
                    tx.exec(SETTLE_SPEND, (usd_nanos, tokens, scope))

        if scopes:
            with self._writing():
                self._atomically(settle)

    def park_task(
        self, task_id: str, fence: int, scope: str, raised: int, needed: str, now: datetime
    ) -> bool:
        stamp = self._ts(now)
        lock = LOCK_BUDGET.format(lock=self.row_lock_clause)

        def park(tx: Tx) -> bool:
            rows = tx.exec(lock, (scope,)).rows
            if not rows or int(rows[0][2]) != raised:
                return False  # raised meanwhile: the caller asks again
            if tx.exec(PARK, (stamp, task_id, fence)).rowcount != 1:
                return False
            tx.exec(INSERT_PARK, (task_id, scope, stamp, needed))
            return True

        def parked_before(tx: Tx) -> bool | None:
            return True if tx.exec(OWN_PARK, (task_id, stamp, fence)).rows else None

        with self._writing():
            return self._atomically_once(park, parked_before)

    def raise_budget(
        self, scope: str, usd_nanos: int | None, tokens: int | None, now: datetime
    ) -> list[str] | None:
        stamp = self._ts(now)

        def lift(tx: Tx) -> list[str] | None:
            if tx.exec(RAISE, (usd_nanos, tokens, stamp, scope)).rowcount != 1:
                return None
            parked = [str(row[0]) for row in tx.exec(PARKED, (scope,)).rows]
            woken = [t for t in parked if tx.exec(WAKE_PARKED, (stamp, t)).rowcount == 1]
            tx.exec(DROP_PARKS, (scope,))
            if woken and self.announce_work:
                tx.exec(self.announce_work)
            return woken

        with self._writing():
            return self._atomically(lift)

    def get_budget(self, scope: str) -> BudgetRecord | None:
        rows = self._exec(GET_BUDGET, (scope,)).rows
        return self._budget(rows[0]) if rows else None

    def budgets_like(self, prefix: str) -> list[BudgetRecord]:
        pattern = prefix.replace("%", r"\%").replace("_", r"\_") + "%"
        return [self._budget(row) for row in self._exec(BUDGETS_LIKE, (pattern,)).rows]

    def budget_park(self, task_id: str) -> str | None:
        rows = self._exec(PARK_OF, (task_id,)).rows
        return str(rows[0][0]) if rows else None

    def mark_budget_alert(self, scope: str, which: str, now: datetime) -> bool:
        statement = MARK_ALERT.format(column=_ALERT_COLUMNS[which])
        with self._writing():
            return self._exec(statement, (self._ts(now), scope)).rowcount == 1

    def _budget(self, row: tuple[Any, ...]) -> BudgetRecord:
        scope, usd, tokens, warn_at, raised, spent_usd, spent_tokens, warned, reached, at = row
        held_usd = int(self._exec(HELD, (budget_limit(USD, scope),)).rows[0][0])
        held_tokens = int(self._exec(HELD, (budget_limit(TOKENS, scope),)).rows[0][0])
        parked = tuple(str(r[0]) for r in self._exec(PARKED, (scope,)).rows)
        return BudgetRecord(
            scope=str(scope),
            usd_nanos=_cap(usd),
            tokens=_cap(tokens),
            warn_at=float(warn_at),
            raised=int(raised),
            warned_at=None if warned is None else sql.time_of(warned),
            reached_at=None if reached is None else sql.time_of(reached),
            updated_at=sql.time_of(at),
            spent_usd_nanos=int(spent_usd) + held_usd,
            spent_tokens=int(spent_tokens) + held_tokens,
            held_usd_nanos=held_usd,
            held_tokens=held_tokens,
            parked=parked,
        )
