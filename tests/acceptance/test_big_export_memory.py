"""``cairn export`` and ``cairn import`` of a 100,000-task batch run in memory
that does not grow with the batch.

Each command runs as a real subprocess, and its peak resident memory is read
from the kernel when it exits (``ru_maxrss``, from ``os.wait4`` on that very
process: a count of pages, the same on a fast machine or a loaded one). The
same command on a batch of ten tasks of the same store gives what any run
needs (the interpreter, cairn's modules); 100,000 tasks may cost only a little
more. Before export and import streamed, those 100,000 tasks (a 50 MB file)
cost about 260 MB more for an export and 160 MB more for an import.

The tasks are written straight into the store, in one statement that writes
the columns ``enqueue`` writes: ``store.enqueue`` commits every 500 tasks,
which takes 15 s for 100,000 on PostgreSQL here, and this test is about
reading and writing them again. They are the rows an export reads and an
import writes, so a task is as good as any other row for the memory a row
costs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cairn.portable import export_batch
from cairn.store import open_store

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BIG, SMALL = "big", "small"
TASKS = {SMALL: 10, BIG: 100_000}
# What 100,000 tasks may add to a command's peak memory. Streamed, no row
# stays: what is left is a page of rows, SQLite's page caches, and Python's
# allocator keeping a little of what it used. Held all at once, the rows cost
# about 260 MB (export) and 160 MB (import).
GROWTH_KIB = 16 * 1024
# Tasks 0 .. N-1 of a batch, pending, in one statement on either backend.
FILL = (
    "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?) "
    "INSERT INTO tasks (id, batch, item_key, name, args, codec, status, created_at, updated_at) "
    "SELECT ? || '/n=' || i, ?, 'n=' || i, 'work', '{\"n\": ' || i || '}', 'json', 'pending', "
    "?, ? FROM n"
)

# Runs ``cairn ARGV`` in a process of its own, then prints its exit code and
# its peak memory (KiB) on a last line. Not straight from pytest's process: a
# child's peak starts from the size of the process it was forked from (an exec
# keeps it), and pytest's is larger than cairn's whole run; this one's is far
# smaller. ``os.wait4`` reports on the one process it waits for.
MEASURE = """
import os, subprocess, sys
cairn = [sys.executable, "-c", "from cairn.cli import main; main()", *sys.argv[1:]]
_, status, usage = os.wait4(subprocess.Popen(cairn).pid, 0)
peak = usage.ru_maxrss // 1024 if sys.platform == "darwin" else usage.ru_maxrss  # bytes there
print(os.waitstatus_to_exitcode(status), peak)
"""


def fill(url: str) -> None:
    """Batches ``big`` and ``small`` of pending tasks in the store at ``url``."""
    store = open_store(url)
    try:
        now = datetime.now(UTC)
        stamp = store._ts(now)  # type: ignore[attr-defined]
        for batch, count in TASKS.items():
            store.ensure_batch(batch, "work", now)
            store._exec(FILL, (count, batch, batch, stamp, stamp))  # type: ignore[attr-defined]
            assert store.batch_counts(batch) == {"pending": count}
    finally:
        store.close()


@pytest.fixture(scope="module")
def sqlite_source(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A SQLite store holding both batches."""
    url = f"sqlite:///{tmp_path_factory.mktemp('source') / 'cairn.db'}"
    fill(url)
    return url


@pytest.fixture(scope="module")
def export_files(sqlite_source: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An export file of each batch (written in this process)."""
    where = tmp_path_factory.mktemp("files")
    files = {batch: where / f"{batch}.cairn" for batch in TASKS}
    store = open_store(sqlite_source)
    try:
        for batch, path in files.items():
            with path.open("w", encoding="utf-8") as out:
                export_batch(store, None, batch, out)
    finally:
        store.close()
    return files


def peak_kib(log: Path, args: list[str]) -> int:
    """Run ``cairn ARGS`` in a subprocess to its end (its output in ``log``);
    its peak resident memory in KiB."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    with log.open("wb") as out:
        ran = subprocess.run(
            [sys.executable, "-c", MEASURE, *args], cwd=ROOT, env=env, stdout=out, stderr=out
        )
    text = log.read_text(errors="replace")
    code, peak = text.splitlines()[-1].split()
    assert ran.returncode == 0, text
    assert code == "0", text
    return int(peak)


def assert_flat(tmp_path: Path, command: Callable[[str], list[str]]) -> None:
    """Run ``command(batch)`` for the small batch, then the big one: each says it
    moved all its tasks, and the big one's peak memory is within ``GROWTH_KIB``
    of the small one's."""
    peaks: dict[str, int] = {}
    for batch in TASKS:
        log = tmp_path / f"{batch}.log"
        peaks[batch] = peak_kib(log, command(batch))
        assert f": {TASKS[batch]} task(s)" in log.read_text(), log.read_text()
    growth = peaks[BIG] - peaks[SMALL]
    assert growth < GROWTH_KIB, (
        f"{command(BIG)[0]}: peak {peaks[SMALL]} KiB for {TASKS[SMALL]} tasks, "
        f"{peaks[BIG]} KiB for {TASKS[BIG]}: {growth} KiB more"
    )


@pytest.mark.timeout(180)
def test_export_of_100k_tasks_from_sqlite_takes_no_more_memory(
    sqlite_source: str, tmp_path: Path
) -> None:
    """`cairn export` of 100,000 tasks from SQLite peaks within a few MB of the
    same command on ten tasks, and writes every task."""
    assert_flat(
        tmp_path,
        lambda batch: ["export", "-b", batch, str(tmp_path / batch), "--store", sqlite_source],
    )


@pytest.mark.timeout(180)
def test_import_of_100k_tasks_into_sqlite_takes_no_more_memory(
    export_files: dict[str, Path], tmp_path: Path
) -> None:
    """`cairn import` of a 100,000-task file into a new SQLite store peaks
    within a few MB of the same command on a ten-task file, and imports every
    task."""
    assert_flat(
        tmp_path,
        lambda batch: ["import", str(export_files[batch]), "--store", str(tmp_path / batch)],
    )


@pytest.mark.timeout(180)
def test_export_of_100k_tasks_from_postgres_takes_no_more_memory(
    pg_url: str, tmp_path: Path
) -> None:
    """`cairn export` of 100,000 tasks from PostgreSQL (fetched through a
    server-side cursor, a page at a time) peaks within a few MB of the same
    command on ten tasks, and writes every task."""
    fill(pg_url)
    assert_flat(
        tmp_path,
        lambda batch: ["export", "-b", batch, str(tmp_path / batch), "--store", pg_url],
    )
