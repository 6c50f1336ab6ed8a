"""An import reads its file a line at a time, more than once (a check of all of
it before anything is written, then the blobs, then the rows), and writes
nothing unless every check passed: whatever form the lines come in, whatever
is wrong with them. (``tests/acceptance/test_big_export_memory.py`` measures
the memory this keeps flat.)

Every test here runs on each backend (the conformance suite).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cairn.blobs import FileBlobStore
from cairn.errors import TransferError
from cairn.portable import export_batch, import_batch
from cairn.store import tables
from cairn.store.records import NewTask
from cairn.store.sqlbase import SQLStore
from tests.integration.store.test_export_columns import V1_FILE, _as_version_2, sql_store

LINES = V1_FILE.read_text(encoding="utf-8").splitlines()


def _generator(path: Path) -> Iterator[str]:
    """The file's lines from a generator: it can be read only once."""
    with path.open(encoding="utf-8") as lines:
        yield from lines


@pytest.fixture
def store(store_url: str) -> Iterator[SQLStore]:
    """The test's store, closed after it."""
    opened = sql_store(store_url)
    yield opened
    opened.close()


@pytest.mark.parametrize("form", ["list", "file", "generator"])
def test_an_import_reads_a_list_a_file_or_a_generator_alike(store: SQLStore, form: str) -> None:
    """The same export imports the same rows from a list of lines, an open
    file (read again from where it stood) or a generator (which reads only
    once: it is copied aside first)."""
    if form == "file":
        with V1_FILE.open(encoding="utf-8") as lines:
            import_batch(store, None, lines, "export_v1.cairn")
    else:
        given: Iterable[str] = LINES if form == "list" else _generator(V1_FILE)
        import_batch(store, None, given, "export_v1.cairn")
    out = io.StringIO()
    export_batch(store, None, "v1", out)
    exported = [json.loads(line) for line in out.getvalue().splitlines()]
    v1 = [json.loads(line) for line in LINES]
    expected = [
        {"table": i["table"], "row": _as_version_2(tables.BY_NAME[i["table"]], i["row"])}
        for i in v1
        if "table" in i
    ]
    assert [i for i in exported if "table" in i] == expected


def test_an_import_of_ids_the_store_has_names_five_of_them(store: SQLStore) -> None:
    """A file whose batch and tasks are all in the store already is refused,
    naming the batch and the first tasks, five in all, then "..."; nothing is
    written."""
    tasks = [NewTask(f"b/n={n}", "work", "{}", "json", "b", f"n={n}") for n in range(8)]
    store.enqueue(tasks, datetime.now(UTC))
    out = io.StringIO()
    export_batch(store, None, "b", out)
    with pytest.raises(TransferError) as refused:
        import_batch(store, None, out.getvalue().splitlines())
    shown = ", ".join(["batch 'b'", *(f"task 'b/n={n}'" for n in range(4))])
    assert f"already has {shown}, ...; nothing was imported" in str(refused.value)
    assert dict(store.batch_counts("b")) == {"pending": 8}


def test_the_ids_a_store_has_are_looked_up_a_page_at_a_time(
    store: SQLStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The survey asks which of a file's task ids the store has a page at a
    time (three queries for 1,200 tasks, none per task), and names those it
    has in file order, across pages, as one look per task did."""
    many = [NewTask(f"b/n={n}", "work", "{}", "json", "b", f"n={n}") for n in range(1200)]
    store.enqueue(many, datetime.now(UTC))
    out = io.StringIO()
    export_batch(store, None, "b", out)
    store.delete_batch("b")
    kept = [NewTask(f"b/n={n}", "work", "{}", "json", "c", f"n={n}") for n in (1100, 3, 700)]
    store.enqueue(kept, datetime.now(UTC))
    looks: list[int] = []
    present = store.tasks_present

    def counted(ids: Sequence[str]) -> set[str]:
        looks.append(len(ids))
        return present(ids)

    monkeypatch.setattr(store, "tasks_present", counted)
    monkeypatch.setattr(store, "get_task", lambda task_id: pytest.fail("a look per task"))

    with pytest.raises(TransferError) as refused:
        import_batch(store, None, out.getvalue().splitlines())
    shown = "task 'b/n=3', task 'b/n=700', task 'b/n=1100'"
    assert f"already has {shown}; nothing was imported" in str(refused.value)
    assert looks == [500, 500, 200]
    assert store.batch_task_name("b") is None
    assert store.tasks_present(["b/n=3", "b/n=4", "nope"]) == {"b/n=3"}
    assert store.tasks_present([]) == set()


def _with_blob(lines: list[str], data: bytes) -> list[str]:
    """``lines`` (rows, then a trailer) with a blob of ``data`` before the trailer,
    the trailer counting the rows and the blob."""
    digest = hashlib.sha256(data).hexdigest()
    blob = json.dumps({"blob": digest, "data": base64.b64encode(data).decode()})
    rows = sum(1 for line in lines if '"table"' in line)
    return [*lines[:-1], blob, json.dumps({"end": True, "rows": rows, "blobs": 1})]


def _dropped(table: str) -> Callable[[list[str]], list[str]]:
    """A damage: the rows of ``table`` left out (and a blob added)."""

    def drop(lines: list[str]) -> list[str]:
        return _with_blob([x for x in lines if f'"table": "{table}"' not in x], b"archive")

    return drop


def _corrupt_blob(lines: list[str]) -> list[str]:
    """A damage: a blob whose bytes are not those its hash names."""
    with_blob = _with_blob(lines, b"archive")
    item = json.loads(with_blob[-2])
    with_blob[-2] = json.dumps({**item, "data": base64.b64encode(b"archivE").decode()})
    return with_blob


def _cut_short(lines: list[str]) -> list[str]:
    """A damage: a blob, and no trailer after it."""
    return _with_blob(lines, b"archive")[:-1]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (_dropped("conversations"), "a messages row refers to conversations 1, which comes"),
        (_corrupt_blob, "is corrupt"),
        (_cut_short, "cut short"),
    ],
    ids=["dangling reference", "corrupt blob", "cut short"],
)
def test_a_damaged_file_writes_nothing_not_even_its_blobs(
    store: SQLStore,
    tmp_path: Path,
    damage: Callable[[list[str]], list[str]],
    message: str,
) -> None:
    """A file that is damaged anywhere (a row that refers to a conversation no
    row gives, a corrupt blob, a missing trailer) is refused before anything is
    written: no row, and no blob either, though the blobs come before the rows
    are written."""
    blobs = FileBlobStore(tmp_path / "blobs")
    with pytest.raises(TransferError, match=message):
        import_batch(store, blobs, damage(LINES), "f.cairn")
    assert store.batch_summaries() == []
    assert list(blobs.blobs()) == []
