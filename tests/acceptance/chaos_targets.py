"""Chaos targets for the tests: the built-in batch, broken in ways chaos must catch.

``lossy_batch`` stands for a store that drops its last commit when the process
dies (a disk cache that lied about fsync, say): each time it starts, before
running the built-in batch, it deletes the step row the store committed most
recently. ``report_on_every_start`` repeats an outside effect on each restart;
``always_fails`` never gets going at all.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing

from cairn import BatchReport
from cairn.chaos import log_effect
from cairn.chaos.batch import run
from cairn.store import sqlite_path


def drop_last_step_commit(store_url: str) -> None:
    """Delete the most recently finished completed step of the SQLite store."""
    path = sqlite_path(store_url)
    if not path.exists():
        return
    with closing(sqlite3.connect(path)) as db, db:
        db.execute(
            "DELETE FROM steps WHERE (task_id, seq) IN (SELECT task_id, seq FROM steps "
            "WHERE kind = 'step' AND status = 'completed' ORDER BY finished_at DESC LIMIT 1)"
        )


def lossy_batch(store_url: str) -> BatchReport:
    """The built-in chaos batch, on a store that lost its last step commit."""
    drop_last_step_commit(store_url)
    return run(store_url)


def report_on_every_start(store_url: str) -> BatchReport:
    """The built-in batch, plus a daily report posted outside ctx.once on every
    start: each restart posts it again, a duplicate chaos must flag."""
    log_effect("daily-report/2024-06-11", "posted")
    return run(store_url)


def always_fails(store_url: str) -> None:
    """A target that crashes by itself, before doing any work."""
    raise RuntimeError(f"cannot reach the batch's data source (store {store_url})")
