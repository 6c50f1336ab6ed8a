"""``cairn export`` of a batch that is running: the file is one moment of the
store, however the batch moves while it is read.

An export reads a batch table by table (tasks, then steps, then operations
...). Here the batch moves between two of those reads, at a chosen moment: the
export has read the tasks, and before it reads the steps a parent task spawns
a child (its row) and records the spawn (a step row). A file that holds the
spawn but not the child is no moment of the store: imported elsewhere, the
parent replays the spawn and finds no child to join. The file must hold both
or neither. Every test runs on SQLite and on PostgreSQL (``store_url``).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cairn import Cairn, Context, TaskDef
from cairn.cli import app as cli_app
from cairn.retry import NO_RETRY
from cairn.store import sqlmove
from cairn.store.sqlmove import BatchPart

BATCH = "family"
WAIT_SECONDS = 60


class _Between:
    """An export's part (``sqlmove.BatchPart``) that runs ``before_read`` first,
    once: the moment between the read of the table before it and its own."""

    def __init__(self, part: BatchPart, before_read: Callable[[], None]) -> None:
        self._part = part
        self.table = part.table
        self._before_read: Callable[[], None] | None = before_read

    @property
    def select(self) -> str:
        before, self._before_read = self._before_read, None
        if before is not None:
            before()
        return self._part.select


@contextmanager
def moving_before(
    monkeypatch: pytest.MonkeyPatch, table: str, move: Callable[[], None]
) -> Iterator[None]:
    """Every export in the block runs ``move`` right before it reads ``table``."""
    parts = [
        _Between(part, move) if part.table.name == table else part for part in sqlmove.BATCH_PARTS
    ]
    with monkeypatch.context() as patch:
        patch.setattr(sqlmove, "BATCH_PARTS", tuple(parts))
        yield


def family(app: Cairn, runs: Counter[str], hold: Callable[[], None]) -> TaskDef[..., int]:
    """A parent that spawns one child, then runs step ``hold`` (where the source
    run waits for the export), then joins the child; the child counts its runs."""

    @app.task(name="child")
    def child(ctx: Context, n: int) -> int:
        def count() -> int:
            runs[f"child {ctx.task_id}"] += 1
            return n * 10

        return int(ctx.step("count", count))

    @app.task(name="parent", retry=NO_RETRY)
    def parent(ctx: Context, n: int) -> int:
        spawned = ctx.spawn(child, key="c", n=n)
        ctx.step("hold", hold)
        [value] = ctx.join(spawned)
        return int(value)

    return parent


def test_an_export_while_a_parent_spawns_holds_the_spawn_and_its_child_or_neither(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the export's read of the tasks and its read of the steps, the
    running parent spawns its child and records the spawn. The file is imported
    into a new store, where the batch runs to its end: the parent completes
    with its child's result, the child having run there (nothing in the file
    pointed at a task the file lacks)."""
    spawned, exported = threading.Event(), threading.Event()
    runs: Counter[str] = Counter()

    def hold() -> None:
        spawned.set()  # the spawn is committed: the parent's next step runs
        assert exported.wait(WAIT_SECONDS)

    source = Cairn(store_url, lease=30.0)
    parent = family(source, runs, hold)
    source.enqueue(BATCH, parent, [{"n": 1}])
    running = threading.Thread(target=source.run_batch, args=(BATCH, parent), daemon=True)

    def spawn_meanwhile() -> None:
        running.start()
        assert spawned.wait(WAIT_SECONDS), "the parent never spawned"

    export = tmp_path / "family.cairn"
    try:
        with moving_before(monkeypatch, "steps", spawn_meanwhile):
            out = CliRunner().invoke(
                cli_app, ["export", "-b", BATCH, str(export), "--store", store_url]
            )
    finally:
        exported.set()
        if running.ident is not None:
            running.join(WAIT_SECONDS)
        source.close()
    assert out.exit_code == 0, out.output

    target = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    got = CliRunner().invoke(cli_app, ["import", str(export), "--store", target])
    assert got.exit_code == 0, got.output
    before = runs.copy()
    with Cairn(target) as elsewhere:
        report = elsewhere.run_batch(BATCH, family(elsewhere, runs, lambda: None), progress=False)
        done = elsewhere.store.get_task(f"{BATCH}/n=1")
    failures: list[Any] = [(f.task_id, f.error_type, f.message) for f in report.failures]
    assert report.counts == {"completed": 2}, failures  # the parent and its child
    assert done is not None
    assert done.result == "10"
    assert runs - before == Counter({f"child {BATCH}/n=1/c": 1})
