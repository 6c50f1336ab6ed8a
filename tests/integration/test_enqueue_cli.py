"""``cairn enqueue MODULE:APP BATCH TASK ITEMS.jsonl``: one task per line,
checked whole first, so a bad line is named by its number and nothing is enqueued;
the enqueued batch is then run by ``cairn worker``.
"""

from __future__ import annotations

import itertools
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from cairn.cli import app as cli_app
from cairn.store import open_store

_modules = itertools.count()

_APP = """
from cairn import Cairn, Context

app = Cairn({url!r})


@app.task
def review(ctx: Context, app_id: str, dry_run: bool = False) -> str:
    return app_id.upper()
"""


@pytest.fixture
def target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """A module of a unique name in the current directory registering ``review``
    on a store of its own: ``MODULE:app`` and the store's URL."""
    for name in ("CAIRN_STORE", "FORCE_COLOR", "TTY_COMPATIBLE", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    module = f"enqueue_app_{next(_modules)}"
    url = f"sqlite:///{tmp_path / 'cairn.db'}"
    (tmp_path / f"{module}.py").write_text(_APP.format(url=url), encoding="utf-8")
    monkeypatch.setattr(sys, "path", list(sys.path))  # load_app adds the cwd
    # `cairn worker` sets up logging on the root logger, to a stream CliRunner closes.
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield f"{module}:app", url
    root.handlers[:] = handlers
    root.setLevel(level)
    sys.modules.pop(module, None)


def cli(*args: str) -> Result:
    """Run ``cairn ARGS`` in-process."""
    return CliRunner().invoke(cli_app, list(args))


def _items(path: Path, *lines: str) -> str:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def _task_ids(url: str) -> list[str]:
    store = open_store(url)
    try:
        return [task.id for task in store.list_tasks()]
    finally:
        store.close()


def test_enqueue_adds_one_task_per_line_and_a_worker_runs_them(
    target: tuple[str, str], tmp_path: Path
) -> None:
    """Each JSON line becomes a task (blank lines skipped); enqueuing the same file
    again adds nothing and says so; `cairn worker --burst` then runs the batch."""
    app, url = target
    items = _items(tmp_path / "apps.jsonl", '{"app_id": "a1"}', "", '{"app_id": "a2"}')
    first = cli("enqueue", app, "nightly", "review", items)
    assert first.exit_code == 0, first.output
    assert "enqueued 2 new task(s) of 'review' into batch 'nightly'" in first.stderr
    again = cli("enqueue", app, "nightly", "review", items)
    assert "enqueued 0 new task(s)" in again.stderr
    assert "2 already there" in again.stderr
    assert _task_ids(url) == ["nightly/app_id=a1", "nightly/app_id=a2"]
    ran = cli("worker", app, "--burst")
    assert ran.exit_code == 0, ran.output
    store = open_store(url)
    try:
        results = [store.get_task(f"nightly/app_id={a}") for a in ("a1", "a2")]
        assert [r.result if r else None for r in results] == ['"A1"', '"A2"']
    finally:
        store.close()


@pytest.mark.parametrize(
    ("bad_line", "problem"),
    [
        ('{"app_id": "a2"', "line 3 is not JSON (Expecting ',' delimiter"),
        ('["a2"]', "line 3 is a JSON list, not an object of argument names to values"),
        ('{"appid": "a2"}', "line 3: task 'review' cannot take the arguments {'appid': 'a2'}"),
        ('{"app_id": "a2", "colour": 1}', "line 3: task 'review' cannot take the arguments"),
    ],
    ids=["not-json", "not-an-object", "missing-argument", "unknown-argument"],
)
def test_a_bad_line_is_named_and_nothing_is_enqueued(
    target: tuple[str, str], tmp_path: Path, bad_line: str, problem: str
) -> None:
    """A bad third line stops the command with exit code 2 and one line naming the
    file and line number; the two good lines before it are not enqueued either."""
    app, url = target
    earlier = cli(
        "enqueue", app, "earlier", "review", _items(tmp_path / "one.jsonl", '{"app_id": "z"}')
    )
    assert earlier.exit_code == 0, earlier.output
    items = _items(tmp_path / "apps.jsonl", '{"app_id": "a0"}', '{"app_id": "a1"}', bad_line)
    result = cli("enqueue", app, "nightly", "review", items)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {items} ")
    assert problem in lines[0]
    assert _task_ids(url) == ["earlier/app_id=z"]


def test_an_unknown_task_or_an_empty_file_is_refused(
    target: tuple[str, str], tmp_path: Path
) -> None:
    """A task name the app does not register is refused with the names it does; a
    file without items is refused; neither writes anything."""
    app, _ = target
    items = _items(tmp_path / "apps.jsonl", '{"app_id": "a1"}')
    unknown = cli("enqueue", app, "nightly", "revue", items)
    assert unknown.exit_code == 2
    assert "registers no task named 'revue' (its tasks: review)" in unknown.stderr
    empty = cli("enqueue", app, "nightly", "review", _items(tmp_path / "empty.jsonl", ""))
    assert empty.exit_code == 2
    assert "holds no items; nothing was enqueued" in empty.stderr
    missing = cli("enqueue", app, "nightly", "review", str(tmp_path / "nowhere.jsonl"))
    assert missing.exit_code == 2
    assert "no items file at" in missing.stderr
    assert not (tmp_path / "cairn.db").exists()


def test_items_can_come_from_stdin(target: tuple[str, str]) -> None:
    """``-`` reads the lines from stdin, checked the same way."""
    app, url = target
    runner = CliRunner()
    good = runner.invoke(
        cli_app, ["enqueue", app, "piped", "review", "-"], input='{"app_id": "s1"}\n'
    )
    assert good.exit_code == 0, good.output
    assert _task_ids(url) == ["piped/app_id=s1"]
    bad = runner.invoke(cli_app, ["enqueue", app, "piped", "review", "-"], input="{}\n[1]\n")
    assert bad.exit_code == 2
    assert "error: stdin line 1: task 'review' cannot take the arguments {}" in bad.stderr


def test_enqueue_with_debounce_sends_each_line_as_an_event_of_its_keys_task(
    target: tuple[str, str], tmp_path: Path
) -> None:
    """``--debounce 60 --key app_id``: three lines of two keys make two waiting
    tasks, the key sent twice carrying its last line's arguments; the command
    counts what became of the lines."""
    app, url = target
    items = _items(
        tmp_path / "events.jsonl",
        '{"app_id": "a1"}',
        '{"app_id": "a2"}',
        '{"app_id": "a1", "dry_run": true}',
    )
    result = cli("enqueue", app, "edits", "review", items, "--debounce", "60", "--key", "app_id")
    assert result.exit_code == 0, result.output
    assert "2 new, 1 debounced, 0 queued, 0 dropped" in result.output
    store = open_store(url)
    try:
        tasks = {str(task.debounce_key): task for task in store.list_tasks()}
    finally:
        store.close()
    assert sorted(tasks) == ["edits/a1", "edits/a2"]
    assert tasks["edits/a1"].status == "waiting"
    assert '"dry_run":true' in tasks["edits/a1"].args.replace(" ", "")


def test_enqueue_with_singleton_drops_or_queues_lines_whose_key_is_held(
    target: tuple[str, str], tmp_path: Path
) -> None:
    """``--singleton K``: the first line holds K, the others are dropped; with
    ``--on-conflict queue`` they wait behind it. A bad choice or a key with a
    NUL is refused with a clear line and exit 2 (nothing written)."""
    app, url = target
    items = _items(tmp_path / "e.jsonl", '{"app_id": "a1"}', '{"app_id": "a2"}')
    dropped = cli("enqueue", app, "sync", "review", items, "--singleton", "K")
    assert "1 new, 0 debounced, 0 queued, 1 dropped" in dropped.output
    queued = cli(
        "enqueue", app, "sync", "review", items, "--singleton", "K", "--on-conflict", "queue"
    )
    assert "0 new, 0 debounced, 2 queued, 0 dropped" in queued.output
    bad = cli("enqueue", app, "sync", "review", items, "--singleton", "K", "--on-conflict", "x")
    assert bad.exit_code == 2
    assert "on_conflict must be 'drop'" in bad.output
    nul = cli("enqueue", app, "sync", "review", items, "--singleton", "a\x00b")
    assert nul.exit_code == 2
    assert "NUL" in nul.output
    assert len(_task_ids(url)) == 3


def test_enqueue_key_names_a_field_every_line_must_have(
    target: tuple[str, str], tmp_path: Path
) -> None:
    """``--key FIELD`` on a line without FIELD stops with its number, nothing enqueued."""
    app, url = target
    items = _items(tmp_path / "e.jsonl", '{"app_id": "a1"}', '{"dry_run": true, "app_id": "x"}')
    assert cli("enqueue", app, "b", "review", items, "--key", "app_id").exit_code == 0
    missing = cli("enqueue", app, "c", "review", items, "--key", "nope")
    assert missing.exit_code == 2
    assert "item 1 has no field 'nope'" in missing.output
    assert sorted(_task_ids(url)) == ["b/a1", "b/x"]
