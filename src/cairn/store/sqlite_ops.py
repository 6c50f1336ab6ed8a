"""SQLite statements for operations (side effects guarded by keys).

Claiming is fenced like every task write: a claim is refused when the caller's
task fence has moved. Recording an outcome is *not* fenced, only matched on the
claim (``calls``): once the outside world has acted, that fact is worth keeping
even if the lease was lost meanwhile, so the next owner reads it instead of
finding the key in doubt.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from cairn.clock import from_iso, to_iso
from cairn.store.records import OperationClaim, OperationRecord

OP_COLUMNS = (
    "scope, key, status, calls, permanent, task_id, step_seq, claim_fence, result, error, "
    "first_claimed_at, claimed_at, completed_at, updated_at"
)

_FENCE = "EXISTS (SELECT 1 FROM tasks WHERE id = ? AND fence = ?)"

_CLAIM = f"""
INSERT INTO operations (scope, key, status, calls, task_id, step_seq, claim_fence,
                        first_claimed_at, claimed_at, updated_at)
SELECT ?, ?, 'claimed', 1, ?, ?, ?, ?, ?, ? WHERE {_FENCE}
ON CONFLICT (scope, key) DO NOTHING
"""

_RECLAIM = f"""
UPDATE operations SET status = 'claimed', calls = calls + 1, permanent = 0, task_id = ?,
       step_seq = ?, claim_fence = ?, claimed_at = ?, updated_at = ?
WHERE scope = ? AND key = ? AND calls = ? AND status != 'completed' AND {_FENCE}
"""


def operation(row: tuple[Any, ...]) -> OperationRecord:
    return OperationRecord(
        scope=row[0],
        key=row[1],
        status=row[2],
        calls=row[3],
        permanent=bool(row[4]),
        task_id=row[5],
        step_seq=row[6],
        claim_fence=row[7],
        result=row[8],
        error=row[9],
        first_claimed_at=from_iso(row[10]),
        claimed_at=from_iso(row[11]),
        completed_at=None if row[12] is None else from_iso(row[12]),
        updated_at=from_iso(row[13]),
    )


def get(conn: sqlite3.Connection, scope: str, key: str) -> OperationRecord | None:
    row = conn.execute(
        f"SELECT {OP_COLUMNS} FROM operations WHERE scope = ? AND key = ?", (scope, key)
    ).fetchone()
    return None if row is None else operation(row)


def claim(
    conn: sqlite3.Connection,
    scope: str,
    key: str,
    task_id: str,
    seq: int,
    fence: int,
    now: datetime,
) -> OperationClaim:
    stamp = to_iso(now)
    cursor = conn.execute(
        _CLAIM, (scope, key, task_id, seq, fence, stamp, stamp, stamp, task_id, fence)
    )
    if cursor.rowcount == 1:
        return OperationClaim(claimed=True, record=None)
    existing = get(conn, scope, key)
    return OperationClaim(claimed=False, record=existing, fenced_out=existing is None)


def reclaim(
    conn: sqlite3.Connection,
    scope: str,
    key: str,
    expected_calls: int,
    task_id: str,
    seq: int,
    fence: int,
    now: datetime,
) -> OperationClaim:
    stamp = to_iso(now)
    cursor = conn.execute(
        _RECLAIM,
        (task_id, seq, fence, stamp, stamp, scope, key, expected_calls, task_id, fence),
    )
    if cursor.rowcount == 1:
        return OperationClaim(claimed=True, record=None)
    return OperationClaim(claimed=False, record=get(conn, scope, key))


def settle(
    conn: sqlite3.Connection,
    scope: str,
    key: str,
    calls: int,
    status: str,
    *,
    result: str | None,
    error: str | None,
    permanent: bool,
    now: datetime,
) -> bool:
    """Record how the claim numbered ``calls`` ended. False if it is no longer ours.

    A key already marked in doubt may still be settled (by a reconcile that
    found the outside world did act), as long as nobody claimed it since.
    """
    stamp = to_iso(now)
    completed_at = stamp if status == "completed" else None
    cursor = conn.execute(
        "UPDATE operations SET status = ?, result = COALESCE(?, result), "
        "error = COALESCE(?, error), permanent = ?, completed_at = ?, updated_at = ? "
        "WHERE scope = ? AND key = ? AND calls = ? "
        "AND (status = 'claimed' OR status = 'in_doubt')",
        (status, result, error, int(permanent), completed_at, stamp, scope, key, calls),
    )
    return cursor.rowcount == 1


def resolve(
    conn: sqlite3.Connection,
    scope: str,
    key: str,
    status: str,
    *,
    result: str | None,
    permanent: bool,
    now: datetime,
) -> bool:
    """An operator's decision on a key that is not completed."""
    stamp = to_iso(now)
    cursor = conn.execute(
        "UPDATE operations SET status = ?, result = ?, permanent = ?, "
        "completed_at = CASE WHEN ? = 'completed' THEN ? ELSE completed_at END, updated_at = ? "
        "WHERE scope = ? AND key = ? AND status != 'completed'",
        (status, result, int(permanent), status, stamp, stamp, scope, key),
    )
    return cursor.rowcount == 1


def listing(
    conn: sqlite3.Connection,
    *,
    prefix: str | None,
    since: datetime | None,
    task_id: str | None,
    statuses: tuple[str, ...] | None,
    limit: int | None,
) -> Iterator[OperationRecord]:
    where: list[str] = []
    params: list[Any] = []
    if prefix:
        # Prefix match with GLOB-safe escaping through substr: keys may hold % or _.
        where.append("substr(key, 1, ?) = ?")
        params += [len(prefix), prefix]
    if since is not None:
        where.append("first_claimed_at >= ?")
        params.append(to_iso(since))
    if task_id is not None:
        where.append("task_id = ?")
        params.append(task_id)
    if statuses:
        where.append(f"status IN ({', '.join('?' for _ in statuses)})")
        params += list(statuses)
    sql = f"SELECT {OP_COLUMNS} FROM operations"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY first_claimed_at, scope, key"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(limit)
    for row in conn.execute(sql, params):
        yield operation(row)


def call_counts(conn: sqlite3.Connection) -> tuple[int, int]:
    """(keys whose function ran more than once, all keys)."""
    row = conn.execute("SELECT COALESCE(SUM(calls > 1), 0), COUNT(*) FROM operations").fetchone()
    return int(row[0]), int(row[1])
