"""The primitives every SQL backend supplies, on which the shared store is built.

A backend runs one statement in its own implicit transaction (``_exec``), runs
several in one transaction (``_atomically``), reads one moment of the store
across several (``_snapshot``), turns a time into a parameter
(``_ts``), and gives a context to hold while writing (``_writing``: SQLite
serialises a process's writers; PostgreSQL needs nothing). A backend that runs
a statement again after losing its connection also recognises, for a write
whose repeat would not be harmless, what that write's first try left
(``_write_once``, ``_atomically_once``), and may renew leases on a connection
of their own (``_exec_lease``). The engine's methods
(``cairn.store.sqlbase``) and the admin side's (``cairn.store.sqladmin``,
``cairn.store.sqltransfer``) use nothing else, so the backends cannot drift
apart in meaning.
"""

from __future__ import annotations

import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any, ClassVar, NamedTuple, Protocol, TypeVar

from cairn.errors import StoreUnavailable
from cairn.store.capabilities import Capabilities

T = TypeVar("T")

# The rows a stream (``Tx.stream``) fetches at once: what it holds in memory,
# however many rows the read finds.
STREAM_PAGE = 256

# A change of at least this many task rows at once (a batch cancelled, retried or
# pruned, a family cancelled) refreshes the planner's statistics where the backend
# keeps them: see ``refresh_task_statistics``.
BULK_CHANGE_ROWS = 1000

# A read statement and its parameters: what a write leaves, found (``_write_once``).
Own = tuple[str, Sequence[Any]]


class Result(NamedTuple):
    """What one statement did: rows changed, and rows returned."""

    rowcount: int
    rows: list[tuple[Any, ...]]


class Tx(Protocol):
    """Statements inside one transaction."""

    def exec(self, statement: str, params: Sequence[Any] = ()) -> Result: ...

    def exec_many(self, statement: str, rows: Iterable[Sequence[Any]]) -> int:
        """Run ``statement`` once per row; return the rows it changed."""
        ...

    def stream(self, statement: str, params: Sequence[Any] = ()) -> Iterator[tuple[Any, ...]]:
        """The rows of the read ``statement``, fetched ``STREAM_PAGE`` at a time
        (``exec`` holds them all at once). Read it to the end before the
        transaction's next statement."""
        ...


class SQLCore(ABC):
    """A SQL database as the shared store sees it: the primitives, and the few
    facts about its dialect the shared SQL asks for."""

    url: str
    identity: str
    # The schema version this cairn writes, and the one found on opening (0: created).
    schema_version: int
    found_schema: int
    capabilities: ClassVar[Capabilities]
    # Appended to the claim query's inner SELECT: FOR UPDATE SKIP LOCKED where
    # the backend has row locks, so concurrent claimers never wait on each other.
    claim_lock_clause: ClassVar[str] = ""
    # Appended to the read of a limit's row in an acquire: FOR UPDATE where the
    # backend has row locks (SQLite's BEGIN IMMEDIATE already serialises writers).
    row_lock_clause: ClassVar[str] = ""
    # Appended to the look at a parent's row when a child is made: FOR SHARE
    # where the backend has row locks, so a cancel of the parent is ordered
    # with the child's insert (SQLite's writers are serialised anyway).
    share_lock_clause: ClassVar[str] = ""
    # A statement that wakes idle workers when new tasks are committed, if the
    # backend can (PostgreSQL's NOTIFY); others are found by polling.
    announce_work: str | None = None
    # A backend whose writers lock the whole store (SQLite) first looks with a
    # read whether there is anything to claim (or permits to renew): an idle
    # poller then takes no write lock, so it never holds one while it is paused,
    # nor queues behind writers.
    look_before_writing: ClassVar[bool] = False
    # The function that finds where one text starts inside another, 1-based,
    # 0 if absent (SQLite's instr; PostgreSQL's strpos, same arguments).
    find_text_function: ClassVar[str] = "instr"
    # The LIKE that ignores letter case (SQLite's LIKE does, for ASCII, as its
    # LOWER() does; PostgreSQL's ILIKE, for all of Unicode).
    case_blind_like: ClassVar[str] = "LIKE"
    # Run after a bulk change of the tasks table, where the backend's planner
    # works from statistics (PostgreSQL's ANALYZE). Without it, after 100,000
    # pending tasks are cancelled the planner believes them pending until
    # autovacuum's next analyze (a minute or more), so a plan chosen meanwhile is
    # chosen for a table that is not there (bench/drain_after_cancel.py).
    refresh_task_statistics: ClassVar[str | None] = None

    @abstractmethod
    def _exec(self, statement: str, params: Sequence[Any] = (), *, patient: bool = True) -> Result:
        """Run one statement as its own transaction.

        ``patient=False`` is for a caller that retries on its own schedule (the
        lease heartbeat, which must recompute its lease for each try): a backend
        that waits out lost connections gives up on the first attempt that
        cannot reach the server, raising ``StoreUnavailable``, instead of waiting
        up to its reconnect timeout."""

    @abstractmethod
    def _atomically(self, work: Callable[[Tx], T]) -> T:
        """Run ``work`` as one transaction (write-locked from the start). A backend
        may run it again after a lost connection, so ``work`` must be idempotent."""

    def _write_once(
        self, statement: str, params: Sequence[Any], own: Own, *, patient: bool = True
    ) -> Result:
        """Run the write ``statement`` (as ``_exec``) where running it twice would
        not be harmless: a claim that would take a second task, an update whose
        row count would say "not ours" about a row it changed itself.

        A backend that runs a statement again on a new connection after losing
        one (PostgreSQL: ``cairn.store.pgpool``) cannot tell whether the first
        try committed and only its answer was lost. On every such try it first
        runs ``own``, a read of the rows that very write leaves, and that no
        other write leaves (this owner's claim at this stamp, this task at the
        next fence, ...): rows found are the answer (the first try committed),
        and the write is not run again. ``own`` checks the fence wherever the
        write does. A backend that never runs a statement twice (SQLite) runs
        the write alone."""
        return self._exec(statement, params, patient=patient)

    def _atomically_once(self, work: Callable[[Tx], T], own: Callable[[Tx], T | None]) -> T:
        """``_atomically`` for ``work`` that must not run twice (as ``_write_once``):
        on a try after a lost connection, ``own`` runs first in the transaction,
        and what it returns, unless None, is the answer (the first try committed)."""
        return self._atomically(work)

    def _exec_lease(self, statement: str, params: Sequence[Any], *, patient: bool = True) -> Result:
        """``_exec`` for a lease renewal: on a connection of its own where the backend
        pools connections, so threads holding every pooled connection (stuck
        behind a lock, or busy with long work through the store) never keep a
        lease from being renewed."""
        return self._exec(statement, params, patient=patient)

    @abstractmethod
    def _snapshot(self, work: Callable[[Tx], T]) -> T:
        """Run ``work``, which only reads, as one transaction that sees one
        moment of the store throughout (every statement the same snapshot),
        without keeping writers out meanwhile."""

    @abstractmethod
    def _ts(self, moment: datetime) -> Any:
        """A time as a statement parameter."""

    @abstractmethod
    def _writing(self) -> contextlib.AbstractContextManager[object]:
        """Held around every write."""

    @abstractmethod
    def close(self) -> None: ...

    def wait_for_work(self, timeout: float) -> bool:
        """Block until new work may have arrived (True), or ``timeout`` seconds
        pass (False). Without a wake-up channel, this only waits."""
        time.sleep(timeout)
        return False

    def _after_bulk_change(self, rows: int | None) -> None:
        """Refresh the planner's statistics of the tasks table after a committed
        change of ``rows`` task rows (None: not counted, an import), if the
        backend keeps them and the change was bulk. Best effort: the change is
        made, and a store that cannot be reached for the refresh now leaves it
        to the server's own (autovacuum's) later one."""
        statement = self.refresh_task_statistics
        if statement is None or (rows is not None and rows < BULK_CHANGE_ROWS):
            return
        with contextlib.suppress(StoreUnavailable):
            self._exec(statement, patient=False)

    def close_thread(self) -> None:  # noqa: B027 - a no-op unless a backend pins connections
        """Release the calling thread's own connection, where there is one."""

    def bound_round_trips(self, seconds: float) -> None:  # noqa: B027 - a no-op without a network
        """Bound a silent round trip to ``seconds`` (a backend with a server to lose)."""
