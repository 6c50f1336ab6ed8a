"""DBOS Transact running the step benchmark's task: N trivial steps in one workflow.

The workload is cairn's ``ctx.step("s", trivial, i)`` loop written the DBOS way:
a ``@DBOS.workflow()`` that calls a ``@DBOS.step()`` N times. DBOS checkpoints each
step's output in its system database (``operation_outputs``) before the workflow
goes on, so each step is one commit there, as in cairn.

DBOS is a process-wide singleton: ``launched`` configures and launches it on one
system database and destroys it afterwards (keeping the registered functions),
so one harness process can point it at a SQLite file, then another, then
PostgreSQL. Launching (migrations, connection pool) is left out of the timing,
as opening cairn's store is.

Settings: no Conductor key (nothing connects out), OTLP off (its default),
auto-upgrade off (its default), logging at WARNING so the timing is not of log
lines; everything else is DBOS's default.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_workflow: Callable[[int], int] | None = None


def trivial(i: int) -> int:
    return i


def registered_workflow() -> Callable[[int], int]:
    """Register the workflow and its step once per process (DBOS keeps a global
    registry, so registering twice would be an error)."""
    global _workflow
    if _workflow is None:
        from dbos import DBOS

        step = DBOS.step(name="bench_trivial")(trivial)

        def overhead(n: int) -> int:
            for i in range(n):
                step(i)
            return n

        _workflow = DBOS.workflow(name="bench_overhead")(overhead)
    return _workflow


def prepare_sqlite(path: Path, journal_mode: str | None) -> str:
    """A system-database URL for ``path``. SQLite keeps WAL mode in the file
    itself, so setting it once here is how a DBOS user would choose WAL;
    ``None`` leaves DBOS's default (SQLite's rollback journal)."""
    if journal_mode is not None:
        conn = sqlite3.connect(path)
        try:
            conn.execute(f"PRAGMA journal_mode = {journal_mode}")
        finally:
            conn.close()
    return f"sqlite:///{path}"


@contextmanager
def launched(system_database_url: str, synchronous: str | None = None) -> Iterator[None]:
    """DBOS launched on ``system_database_url``; ``synchronous`` (SQLite only) is
    set on every connection DBOS opens, through SQLAlchemy's connect event, the
    documented place for per-connection pragmas. ``None`` keeps SQLite's default
    (FULL)."""
    from dbos import DBOS
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    registered_workflow()

    def set_synchronous(dbapi_connection: Any, _record: Any) -> None:
        if isinstance(dbapi_connection, sqlite3.Connection):
            dbapi_connection.execute(f"PRAGMA synchronous = {synchronous}")

    if synchronous is not None:
        event.listen(Engine, "connect", set_synchronous)
    try:
        DBOS(
            config={
                "name": "cairn_bench",
                "system_database_url": system_database_url,
                "enable_otlp": False,
                "log_level": "WARNING",
            }
        )
        DBOS.launch()
        try:
            yield
        finally:
            DBOS.destroy(destroy_registry=False)
    finally:
        if synchronous is not None:
            event.remove(Engine, "connect", set_synchronous)


def run_workflow(steps: int) -> tuple[float, float]:
    """Run the workflow once (DBOS must be launched); its wall and process CPU
    seconds (DBOS's own threads count). Checks, outside the timing, that DBOS
    recorded every step."""
    from dbos import DBOS, SetWorkflowID

    workflow = registered_workflow()
    workflow_id = f"bench-{uuid.uuid4()}"
    wall, cpu = time.perf_counter(), time.process_time()
    with SetWorkflowID(workflow_id):
        workflow(steps)
    elapsed = time.perf_counter() - wall, time.process_time() - cpu
    recorded = len(DBOS.list_workflow_steps(workflow_id))
    if recorded != steps:
        raise SystemExit(f"DBOS recorded {recorded} steps, not {steps}")
    return elapsed


def sqlite_settings(path: Path) -> str:
    """The journal mode DBOS's file ended up in, read back rather than assumed."""
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("PRAGMA journal_mode").fetchone()
    finally:
        conn.close()
    return str(row[0])
