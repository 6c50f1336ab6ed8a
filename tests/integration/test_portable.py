"""Moving and keeping stores: backup, export/import of a batch, prune and gc, with
their blobs, through the real CLI (in-process) on real SQLite files and PostgreSQL."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from cairn import Cairn, Context, TaskDef
from cairn.blobs import FileBlobStore, is_ref
from cairn.cli import app as cli_app
from cairn.clock import FakeClock
from cairn.testing import Fault, FaultPlan, InjectedCrash
from tests.crashes import LEASE, PAST_LEASE, second_process

LIMIT = 1024
ITEMS = [{"n": n} for n in range(1, 5)]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No store or blob store from the outer environment."""
    for name in ("CAIRN_STORE", "CAIRN_BLOBS"):
        monkeypatch.delenv(name, raising=False)


def cli(*args: str) -> Result:
    """Run ``cairn ARGS`` in-process."""
    return CliRunner().invoke(cli_app, list(args))


def rows(n: int) -> list[dict[str, Any]]:
    return [{"id": i, "name": f"row-{i:06d}"} for i in range(n * 100)]


def report_task(
    app: Cairn,
    calls: Counter[str],
    gate: threading.Event | None = None,
    entered: threading.Event | None = None,
) -> TaskDef[..., Any]:
    """Per item: a large 'fetch' (offloaded), then 'total' (inline). With ``gate``,
    item 3's fetch sets ``entered`` and waits for the gate."""

    def fetch(n: int) -> list[dict[str, Any]]:
        calls[f"fetch/{n}"] += 1
        if gate is not None and entered is not None and n == 3:
            entered.set()
            gate.wait(30)
        return rows(n)

    def total(n: int, data: list[dict[str, Any]]) -> int:
        calls[f"total/{n}"] += 1
        return sum(r["id"] for r in data)

    def report(ctx: Context, n: int) -> int:
        data = ctx.step("fetch", fetch, n)
        result: int = ctx.step("total", total, n, data)
        return result

    return app.task(name="report")(report)


def expected(n: int) -> int:
    return sum(range(n * 100))


def crash_in_batch(url: str, blobs: Path, clock: FakeClock, calls: Counter[str]) -> None:
    """Run batch 'daily' until item 3 crashes just before its 'total' step."""
    with Cairn(url, clock=clock, lease=LEASE, blobs=str(blobs), inline_limit=LIMIT) as app:
        task = report_task(app, calls)
        FaultPlan([Fault("before_step", step="total", task_id="daily/n=3")]).install(app)
        with pytest.raises(InjectedCrash):
            app.run_batch("daily", task, ITEMS, concurrency=1, progress=False)


def test_backup_taken_while_a_batch_runs_resumes_on_another_machine(
    tmp_path: Path, clock: FakeClock
) -> None:
    """`cairn backup` taken while a batch is mid-step gives a copy (database and
    blobs) that, moved to another directory, resumes the batch to the same results;
    steps the copy had recorded are not called again."""
    db = tmp_path / "laptop" / "cairn.db"
    calls: Counter[str] = Counter()
    gate, entered = threading.Event(), threading.Event()
    with Cairn(f"sqlite:///{db}", clock=clock, lease=LEASE, inline_limit=LIMIT) as app:
        task = report_task(app, calls, gate, entered)
        runner = threading.Thread(
            target=app.run_batch,
            args=("daily", task, ITEMS),
            kwargs={"concurrency": 1, "progress": False},
        )
        runner.start()
        assert entered.wait(30)
        copy = tmp_path / "backup" / "copy.db"
        result = cli("backup", str(copy), "--store", str(db))
        gate.set()
        runner.join(60)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in copy.parent.iterdir()) == ["copy.db", "copy.db-blobs"]

    other_machine = tmp_path / "desktop"
    shutil.copytree(copy.parent, other_machine)
    before = calls.copy()
    clock.advance(PAST_LEASE)
    with second_process(f"sqlite:///{other_machine / 'copy.db'}", clock, inline_limit=LIMIT) as b:
        report = b.run_batch("daily", report_task(b, calls), progress=False)
        results = {t: b.store.get_task(f"daily/n={t}") for t in range(1, 5)}
    assert report.ok
    for n, record in results.items():
        assert record is not None
        assert record.status == "completed"
        assert b.codec_named(record.codec).decode(record.result or "") == expected(n)
    resumed = calls - before
    assert resumed["fetch/1"] == resumed["fetch/2"] == 0  # recorded in the copy
    assert resumed["fetch/3"] == 1  # it was mid-call when the copy was taken


def test_export_from_sqlite_import_into_postgres_resumes_the_batch(
    tmp_path: Path, clock: FakeClock, pg_url: str
) -> None:
    """A batch crashed on SQLite, exported with `cairn export`, imported into
    PostgreSQL with `cairn import`, resumes there: recorded steps (offloaded ones
    included) are not called again and every result is right."""
    calls: Counter[str] = Counter()
    sqlite_url = f"sqlite:///{tmp_path / 'a.db'}"
    crash_in_batch(sqlite_url, tmp_path / "a-blobs", clock, calls)
    export = tmp_path / "daily.cairn"
    out = cli(
        "export",
        "--batch",
        "daily",
        str(export),
        "--store",
        sqlite_url,
        "--blobs",
        str(tmp_path / "a-blobs"),
    )
    assert out.exit_code == 0, out.output
    pg_blobs = tmp_path / "pg-blobs"
    got = cli("import", str(export), "--store", pg_url, "--blobs", str(pg_blobs))
    assert got.exit_code == 0, got.output

    before = calls.copy()
    with Cairn(pg_url, clock=clock, blobs=str(pg_blobs), inline_limit=LIMIT) as app:
        imported = app.store.get_task("daily/n=3")
        assert imported is not None
        assert imported.status == "pending"
        assert is_ref(app.store.load_history("daily/n=3")[1].output)
        report = app.run_batch("daily", report_task(app, calls), progress=False)
        results = [
            app.run(app.registered("report"), task_id=f"daily/n={n}", n=n) for n in range(1, 5)
        ]
    assert report.ok
    assert results == [expected(n) for n in range(1, 5)]
    resumed = calls - before
    assert resumed == Counter({"total/3": 1, "fetch/4": 1, "total/4": 1})


def test_import_into_a_store_with_the_same_ids_writes_nothing(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Importing a batch whose ids the store already has fails with an error naming
    them, and the store is left exactly as it was."""
    url = f"sqlite:///{tmp_path / 'a.db'}"
    crash_in_batch(url, tmp_path / "a.db-blobs", clock, Counter())  # the default place
    export = tmp_path / "daily.cairn"
    assert cli("export", "-b", "daily", str(export), "--store", url).exit_code == 0
    before = (tmp_path / "a.db").read_bytes()
    result = cli("import", str(export), "--store", url)
    assert result.exit_code == 2
    assert "already has batch 'daily'" in result.output
    assert "nothing was imported" in result.output
    assert (tmp_path / "a.db").read_bytes() == before


def test_an_export_of_an_unknown_version_is_refused(tmp_path: Path, clock: FakeClock) -> None:
    """An export file of a version this cairn does not know is refused with a clear
    error, and nothing is written; so is a file cut short."""
    url = f"sqlite:///{tmp_path / 'a.db'}"
    crash_in_batch(url, tmp_path / "a.db-blobs", clock, Counter())  # the default place
    export = tmp_path / "daily.cairn"
    assert cli("export", "-b", "daily", str(export), "--store", url).exit_code == 0
    lines = export.read_text().splitlines()
    header = json.loads(lines[0])
    newer = tmp_path / "newer.cairn"
    newer.write_text("\n".join([json.dumps({**header, "version": 99}), *lines[1:]]) + "\n")
    cut = tmp_path / "cut.cairn"
    cut.write_text("\n".join(lines[:-1]) + "\n")
    target = f"sqlite:///{tmp_path / 'b.db'}"
    Cairn(target).store.close()

    refused = cli("import", str(newer), "--store", target)
    assert refused.exit_code == 2
    assert "version 99" in refused.output
    assert "reads versions 1, 2" in refused.output
    short = cli("import", str(cut), "--store", target)
    assert short.exit_code == 2
    assert "cut short" in short.output
    assert cli("batches", "--store", target, "--json").output.strip() == "[]"


def test_prune_keeps_unfinished_batches_and_gc_frees_only_old_unreferenced_blobs(
    tmp_path: Path, clock: FakeClock
) -> None:
    """prune refuses a batch with running tasks unless asked; it deletes a finished
    one. gc then deletes the blobs only the pruned batch referred to once they are
    past the grace period, keeps referenced ones, and --dry-run deletes nothing."""
    url = f"sqlite:///{tmp_path / 'a.db'}"
    blobs_dir = tmp_path / "blobs"
    crash_in_batch(url, blobs_dir, clock, Counter())  # 'daily' is left with a running task
    with Cairn(url, clock=clock, blobs=str(blobs_dir), inline_limit=LIMIT) as app:
        done = app.run_batch("done", report_task(app, Counter()), [{"n": 7}], progress=False)
        assert done.ok
    store = FileBlobStore(blobs_dir)
    all_blobs = {b.sha256 for b in store.blobs()}
    assert len(all_blobs) == 4  # items 1, 2, 3 of 'daily' and item 7 of 'done'

    refused = cli("prune", "--finished-before", "0s", "--batch", "daily", "--store", url)
    assert refused.exit_code == 2
    assert "pending or running" in refused.output
    pruned = cli("prune", "--finished-before", "2100-01-01", "--store", url)
    assert pruned.exit_code == 0, pruned.output
    assert "deleted batch done" in pruned.output
    assert "daily" not in pruned.stdout
    with Cairn(url) as app:
        assert app.store.get_task("done/n=7") is None
        assert app.store.get_task("daily/n=1") is not None

    young = cli("gc", "--store", url, "--blobs", str(blobs_dir))
    assert young.exit_code == 0
    assert "deleted 0 blob(s)" in young.output
    for path in blobs_dir.rglob("*"):
        if path.is_file():
            os.utime(path, (time.time() - 2 * 86400, time.time() - 2 * 86400))
    dry = cli("gc", "--dry-run", "--store", url, "--blobs", str(blobs_dir))
    assert "would delete 1 blob(s)" in dry.output
    assert {b.sha256 for b in store.blobs()} == all_blobs
    real = cli("gc", "--store", url, "--blobs", str(blobs_dir))
    assert real.exit_code == 0
    assert "deleted 1 blob(s)" in real.output
    left = {b.sha256 for b in store.blobs()}
    assert len(left) == 3
    assert left < all_blobs

    clock.advance(PAST_LEASE)
    with second_process(url, clock, blobs=str(blobs_dir), inline_limit=LIMIT) as other:
        assert other.run_batch("daily", report_task(other, Counter()), progress=False).ok


# A sound export file (version 1, ten rows, no blobs) that each case below damages.
V1_LINES = (Path(__file__).parent / "export_v1.cairn").read_text(encoding="utf-8").splitlines()


def _changed(number: int, **values: Any) -> list[str]:
    """The sound file's lines with line ``number`` (1-based, a row) given ``values``."""
    lines = list(V1_LINES)
    item = json.loads(lines[number - 1])
    lines[number - 1] = json.dumps({**item, "row": {**item["row"], **values}})
    return lines


def _header(**values: Any) -> list[str]:
    """The sound file with its header changed (a value of None: the key left out)."""
    header = {**json.loads(V1_LINES[0]), **values}
    return [json.dumps({k: v for k, v in header.items() if v is not None}), *V1_LINES[1:]]


def _inserted(line: str) -> list[str]:
    """The sound file with ``line`` just before its trailer (line 12)."""
    return [*V1_LINES[:-1], line, V1_LINES[-1]]


_BLOB_DATA = (b"a blob the file holds", b"a blob it does not")
_DIGEST = tuple(hashlib.sha256(data).hexdigest() for data in _BLOB_DATA)


def _ref(digest: str) -> str:
    return "!blob:" + json.dumps({"sha256": digest, "size": 1, "uri": "x"}, separators=(",", ":"))


def _blobbed(content: str) -> list[str]:
    """The sound file with a blob that its task's result refers to (so an
    import that gets as far as the blobs writes one), and ``content`` as the
    first message's content (line 10)."""
    lines = _changed(3, result=_ref(_DIGEST[0]))
    lines[9] = _changed(10, content=content)[9]
    blob = {"blob": _DIGEST[0], "data": base64.b64encode(_BLOB_DATA[0]).decode()}
    return [*lines[:-1], json.dumps(blob), '{"end": true, "rows": 10, "blobs": 1}']


HOSTILE: dict[str, tuple[list[str] | bytes, str]] = {
    "header without batch": (_header(batch=None), "line 1: the header names no batch"),
    "header batch a number": (_header(batch=5), "line 1: the header names no batch"),
    "header version true": (_header(version=True), "version True"),
    "header a list": (["[1, 2]", *V1_LINES[1:]], "is not a cairn export file"),
    "header a string": (['"x"', *V1_LINES[1:]], "is not a cairn export file"),
    "entry a list": (_inserted("[1, 2]"), "line 12: not a JSON object"),
    "entry a string": (_inserted('"x"'), "line 12: not a JSON object"),
    "entry null": (_inserted("null"), "line 12: not a JSON object"),
    "table a number": (_inserted('{"table": 5, "row": {}}'), "line 12: unknown entry"),
    "table a list": (_inserted('{"table": ["tasks"], "row": {}}'), "line 12: unknown entry"),
    "blob without data": (_inserted('{"blob": "ab"}'), "line 12: a blob without its sha256"),
    "blob digest a number": (_inserted('{"blob": 5, "data": ""}'), "line 12: a blob without"),
    "blob data a number": (_inserted('{"blob": "ab", "data": 5}'), "line 12: a blob without"),
    "blob data not base64": (_inserted('{"blob": "ab", "data": "a"}'), "line 12: blob 'ab' is not"),
    "file not UTF-8": (
        "\n".join(V1_LINES[:3]).encode() + b"\n\xff\xfe\n" + "\n".join(V1_LINES[3:]).encode(),
        "is not UTF-8 text: not a cairn export file",
    ),
    "line not UTF-8": (  # after more than a block: the header decodes
        "\n".join(_changed(3, args="x" * 20_000)).encode() + b"\n\xff\xfe\n",
        "is not UTF-8 text after line",
    ),
    "time a number": (_changed(2, created_at=5), "line 2: a batches row's created_at is 5"),
    "time not a time": (_changed(3, created_at="soon"), "line 3: a tasks row's created_at"),
    "time without offset": (
        _changed(3, created_at="2026-05-24T04:30:00"),
        "not an ISO 8601 time with an offset",
    ),
    "id a list": (_changed(3, id=[1]), "line 3: a tasks row's id is [1], not text"),
    "name null": (_changed(3, name=None), "line 3: a tasks row's name is None"),
    "fence text": (_changed(3, fence="x", status="running"), "tasks row's fence is 'x'"),
    "attempts true": (_changed(3, attempts=True), "tasks row's attempts is True"),
    "attempts too big": (_changed(3, attempts=2**64), "not an integer"),
    "deferred text": (_changed(4, deferred="x"), "line 4: a steps row's deferred"),
    "deferred NaN": (_changed(4, deferred=float("nan")), "not a finite number"),
    "flag 2": (_changed(6, permanent=2), "operations row's permanent is 2"),
    "conv_id text": (_changed(9, conv_id="1"), "line 9: a messages row's conv_id is '1'"),
    "content a number": (_changed(10, content=5), "line 10: a messages row's content is 5"),
    "micros a list": (_changed(10, created_at=[1]), "messages row's created_at is [1]"),
    "another batch's row": (_changed(2, name="other"), "batches row of batch 'other'"),
    "another batch's task": (_changed(3, batch="other"), "line 3: a tasks row of batch 'other'"),
    "a task of no batch": (_changed(3, batch=None), "line 3: a tasks row of batch None"),
    "NUL in text": (_changed(3, args='"a\x00b"'), "line 3: a tasks row's args holds a NUL"),
    "NUL in a name": (_changed(3, name="re\x00port"), "which PostgreSQL cannot store"),
    "lone surrogate": (_changed(3, item_key="n\udcff"), "item_key holds a lone surrogate"),
    "surrogate in content": (_changed(10, content='"\ud800"'), "content holds a lone surrogate"),
    "attempts past 32 bits": (_changed(3, attempts=2**31), "not an integer that fits in 32"),
    "tokens past 32 bits": (_changed(10, tokens=-(2**31) - 1), "messages row's tokens is"),
    "blob not in the file": (
        _blobbed(_ref(_DIGEST[1])),
        f"line 10: the row refers to blob {_DIGEST[1]}, which the file does not hold",
    ),
    "damaged blob reference": (_blobbed("!blob:{"), "line 10: the record holds a damaged blob"),
}


@pytest.mark.parametrize(("lines", "message"), HOSTILE.values(), ids=HOSTILE.keys())
def test_a_malformed_export_file_is_refused_in_one_line(
    tmp_path: Path, lines: list[str] | bytes, message: str
) -> None:
    """`cairn import` of a file that is JSON of the wrong shape (a header or an
    entry that is not an object or lacks what it must have, a value of the
    wrong type in a row or a blob) exits 2 with one line that names the file
    (and the line), never a traceback, and writes nothing: no task, no blob."""
    bad = tmp_path / "bad.cairn"
    if isinstance(lines, bytes):
        bad.write_bytes(lines)
    else:
        bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    target = f"sqlite:///{tmp_path / 'b.db'}"
    blobs = tmp_path / "blobs"

    result = cli("import", str(bad), "--store", target, "--blobs", str(blobs))
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # fail(), not an escaped exception
    assert "Traceback" not in result.output
    assert message in result.output
    assert f"error: {bad}" in result.output.replace("\n", " ")
    assert cli("batches", "--store", target, "--json").output.strip() == "[]"
    with Cairn(target) as app:
        assert app.store.get_task("v1/n=1") is None
    assert not blobs.exists() or not any(blobs.rglob("*.*"))


def _with_row(lines: list[str], number: int, **values: Any) -> list[str]:
    """``lines`` with line ``number`` (1-based, a row) given ``values``."""
    item = json.loads(lines[number - 1])
    changed = json.dumps({**item, "row": {**item["row"], **values}})
    return [*lines[: number - 1], changed, *lines[number:]]


# Damage a store takes differently: PostgreSQL refuses it on insert, after the
# blobs were written; SQLite keeps it. Each file holds a blob.
STORE_DAMAGE: dict[str, tuple[list[str], str]] = {
    "NUL in text": (_with_row(_blobbed(_ref(_DIGEST[0])), 4, name="f\x00"), "holds a NUL"),
    "past 32 bits": (_with_row(_blobbed(_ref(_DIGEST[0])), 4, seq=2**31), "fits in 32 bits"),
    "another batch's task": (_with_row(_blobbed(_ref(_DIGEST[0])), 3, batch="w"), "batch 'w'"),
}


@pytest.mark.parametrize(("lines", "message"), STORE_DAMAGE.values(), ids=STORE_DAMAGE.keys())
def test_damage_one_store_would_take_is_refused_on_both_before_any_blob(
    tmp_path: Path, store_url: str, lines: list[str], message: str
) -> None:
    """A file with text PostgreSQL cannot hold, an integer too big for its
    column there, or a task of another batch is refused on either store, in
    one line, before anything is written: no task, and not the blob the file
    holds (PostgreSQL used to refuse the rows only after the blobs were in)."""
    bad = tmp_path / "bad.cairn"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    blobs = tmp_path / "blobs"

    result = cli("import", str(bad), "--store", store_url, "--blobs", str(blobs))
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    assert message in result.output
    assert f"error: {bad}" in result.output.replace("\n", " ")
    assert result.output.count("error:") == 1, result.output
    assert cli("batches", "--store", store_url, "--json").output.strip() == "[]"
    with Cairn(store_url) as app:
        assert app.store.get_task("v1/n=1") is None
    assert not blobs.exists() or not any(blobs.rglob("*.*"))


def test_a_file_that_holds_the_blobs_its_rows_refer_to_imports(tmp_path: Path) -> None:
    """The sound file given a blob its rows refer to imports, blob and all, and a
    column PostgreSQL keeps in a bigint (a task's fence) takes a value past 32
    bits: the checks that refuse damage refuse only damage."""
    lines = _blobbed(_ref(_DIGEST[0]))
    task_row = {**json.loads(lines[2])["row"], "fence": 2**40}
    lines[2] = json.dumps({"table": "tasks", "row": task_row})
    good = tmp_path / "good.cairn"
    good.write_text("\n".join(lines) + "\n", encoding="utf-8")
    target = f"sqlite:///{tmp_path / 'b.db'}"
    blobs = tmp_path / "blobs"

    result = cli("import", str(good), "--store", target, "--blobs", str(blobs))
    assert result.exit_code == 0, result.output
    with Cairn(target) as app:
        task = app.store.get_task("v1/n=1")
        assert task is not None
        assert task.fence == 2**40
    assert FileBlobStore(blobs).get(_DIGEST[0]) == _BLOB_DATA[0]
