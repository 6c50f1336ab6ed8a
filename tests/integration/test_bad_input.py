"""Bad input is refused with an error that says how to fix it, and nothing is written.

A store path that holds something else is left byte-for-byte unchanged (same
bytes, same mtime); bad task arguments leave no task or batch row behind.
"""

from __future__ import annotations

import inspect
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn import (
    Cairn,
    ConfigurationError,
    Context,
    NotACairnStore,
    SchemaTooNew,
    TaskArgumentsError,
    TaskConflict,
    TaskNotRegistered,
)
from cairn.clock import FakeClock
from cairn.store import admin
from cairn.store.migrate import latest_version

Snapshot = tuple[bytes, int]


def _snapshot(path: Path) -> Snapshot:
    return path.read_bytes(), path.stat().st_mtime_ns


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _run_once(url: str) -> object:
    """Register a task on a new app at ``url`` and run it: the store opens here."""
    with Cairn(url, clock=FakeClock()) as app:

        @app.task
        def noop(ctx: Context, n: int) -> int:
            return n

        return app.run(noop, n=1)


def _assert_nothing_written(app: Cairn) -> None:
    assert list(admin(app.store).list_tasks()) == []
    assert admin(app.store).batch_summaries() == []


# -- store URLs and paths ---------------------------------------------------------------


@pytest.mark.parametrize("url", ["mysql://localhost/cairn", "redis:///tmp/cairn", "s3://b/k.db"])
def test_unknown_store_scheme_names_the_schemes_cairn_knows(url: str, tmp_path: Path) -> None:
    """An unknown URL scheme is a ConfigurationError that says which URLs work."""
    with pytest.raises(ConfigurationError, match=r"unknown store URL scheme.*sqlite:///"):
        _run_once(url)
    assert _listing(tmp_path) == []


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///"])
def test_sqlite_url_without_a_path_is_refused(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sqlite URL with no file path is a ConfigurationError showing the right form;
    no file is created anywhere."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match=r"has no path.*sqlite:///relative/path\.db"):
        _run_once(url)
    assert _listing(tmp_path) == []


def _text_file(path: Path) -> None:
    path.write_text("name,score\nalice,3\n")


def _other_apps_database(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users (name) VALUES ('alice')")
    conn.commit()
    conn.close()


def _newer_cairn_store(path: Path) -> None:
    Cairn(f"sqlite:///{path}").store.close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE cairn_meta SET value = '999' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()


@pytest.mark.parametrize(
    ("make", "error", "says"),
    [
        (_text_file, NotACairnStore, r"not a SQLite database.*not changed"),
        (_other_apps_database, NotACairnStore, r"something else \(tables: users\).*not changed"),
        (_newer_cairn_store, SchemaTooNew, r"newer cairn \(schema 999.*Upgrade cairn"),
    ],
    ids=["text-file", "other-apps-db", "schema-999"],
)
def test_a_file_that_is_not_a_usable_store_is_left_unchanged(
    make: Callable[[Path], None], error: type[Exception], says: str, db_path: Path
) -> None:
    """A path holding a text file, another app's database, or a store from a newer
    cairn is refused with an error saying what to do, and its bytes and mtime are
    unchanged."""
    make(db_path)
    before = _snapshot(db_path)
    with pytest.raises(error, match=says):
        _run_once(f"sqlite:///{db_path}")
    with pytest.raises(error):
        _run_once(str(db_path))  # a bare path means the same file
    assert _snapshot(db_path) == before


def test_schema_too_new_is_refused_without_touching_the_version(db_path: Path) -> None:
    """A store from a newer cairn keeps its schema version: cairn never migrates down."""
    _newer_cairn_store(db_path)
    with pytest.raises(SchemaTooNew, match=f"knows up to {latest_version('sqlite')}"):
        _run_once(f"sqlite:///{db_path}")
    conn = sqlite3.connect(f"{db_path.as_uri()}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT value FROM cairn_meta WHERE key = 'schema_version'")
        assert row.fetchone() == ("999",)
    finally:
        conn.close()


def test_a_directory_is_not_a_store(tmp_path: Path) -> None:
    """A directory given as the store is refused, and nothing is created inside it."""
    folder = tmp_path / "runs"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    before = (_listing(folder), folder.stat().st_mtime_ns)
    with pytest.raises(NotACairnStore, match="is a directory"):
        _run_once(f"sqlite:///{folder}")
    assert (_listing(folder), folder.stat().st_mtime_ns) == before


# -- task functions ------------------------------------------------------------------------


@pytest.fixture
def other_app(tmp_path: Path) -> Iterator[Cairn]:
    instance = Cairn(f"sqlite:///{tmp_path / 'other.db'}", clock=FakeClock())
    yield instance
    instance.close()


def test_undecorated_function_is_not_registered(app: Cairn) -> None:
    """Passing a plain function, not one decorated with @app.task, is TaskNotRegistered."""

    def plain(ctx: Context, n: int) -> int:
        return n

    with pytest.raises(TaskNotRegistered, match=r"'plain' is not a task registered.*@app\.task"):
        app.run(plain, n=1)  # type: ignore[call-overload]
    with pytest.raises(TaskNotRegistered):
        app.run_batch("b", plain, [{"n": 1}], progress=False)  # type: ignore[arg-type]
    _assert_nothing_written(app)


def test_task_of_another_app_is_not_registered(app: Cairn, other_app: Cairn) -> None:
    """A task decorated on another Cairn instance, even under a name this app also
    uses, is TaskNotRegistered here."""

    @other_app.task(name="review")
    def theirs(ctx: Context, n: int) -> int:
        return n

    @app.task(name="review")
    def ours(ctx: Context, n: int) -> int:
        return n

    with pytest.raises(TaskNotRegistered, match="not a task registered on this app"):
        app.run(theirs, n=1)
    with pytest.raises(TaskNotRegistered):
        app.enqueue("b", theirs, [{"n": 1}])
    _assert_nothing_written(app)


def test_two_functions_under_one_name_are_refused(app: Cairn) -> None:
    """Registering a second function under a taken task name is a TaskConflict."""

    @app.task(name="review")
    def first(ctx: Context) -> None:
        return None

    def second(ctx: Context) -> None:
        return None

    with pytest.raises(TaskConflict, match="Give one a name= of its own"):
        app.task(name="review")(second)


# -- task arguments --------------------------------------------------------------------------


def _review(ctx: Context, app_id: str, *, dry_run: bool = False) -> str:
    return app_id


def _positional(ctx: Context, app_id: str, /) -> str:
    return app_id


@pytest.mark.parametrize(
    ("fn", "kwargs", "problem"),
    [
        (_review, {}, "missing a required argument: 'app_id'"),
        (_review, {"app_id": "a1", "colour": "red"}, "unexpected keyword argument 'colour'"),
        (_positional, {"app_id": "a1"}, "app_id"),
    ],
    ids=["missing", "extra", "positional-only"],
)
def test_arguments_that_do_not_fit_are_refused_before_anything_is_written(
    app: Cairn, fn: Callable[..., str], kwargs: dict[str, Any], problem: str
) -> None:
    """Arguments that do not fit the signature raise TaskArgumentsError naming the
    task and its signature; no task and no batch is written."""
    task = app.task(name="review")(fn)
    with pytest.raises(TaskArgumentsError) as refused:
        app.run(task, **kwargs)
    message = str(refused.value)
    assert "'review'" in message
    assert problem in message
    assert f"review{inspect.signature(fn)}" in message
    assert "Nothing was recorded" in message
    with pytest.raises(TaskArgumentsError):
        app.run_batch("apps", task, [kwargs], progress=False)
    _assert_nothing_written(app)


def test_a_bad_third_item_writes_nothing_for_a_list(app: Cairn) -> None:
    """A list of items is checked whole: a bad third item means no task and no batch."""
    task = app.task(name="review")(_review)
    items: list[dict[str, object]] = [{"app_id": "a1"}, {"app_id": "a2"}, {"appid": "a3"}]
    with pytest.raises(TaskArgumentsError, match="'appid'"):
        app.run_batch("apps", task, items, progress=False)
    with pytest.raises(TaskArgumentsError):
        app.enqueue("apps", task, items)
    _assert_nothing_written(app)


def test_a_bad_item_in_a_stream_writes_no_task_of_its_chunk(app: Cairn) -> None:
    """A streamed chunk is checked before it is written: a bad item in the first chunk
    leaves no task behind."""
    task = app.task(name="review")(_review)

    def items() -> Iterator[dict[str, object]]:
        yield {"app_id": "a1"}
        yield {"app_id": "a2"}
        yield {"app": "a3"}

    with pytest.raises(TaskArgumentsError):
        app.run_batch("apps", task, items(), progress=False)
    assert list(admin(app.store).list_tasks()) == []


def test_arguments_that_cannot_be_recorded_are_refused(app: Cairn) -> None:
    """Arguments the codec cannot encode raise TaskArgumentsError naming the task;
    nothing is written."""
    task = app.task(name="review")(_review)
    with pytest.raises(
        TaskArgumentsError, match=r"task 'review': its arguments cannot be recorded"
    ):
        app.run(task, app_id=object())
    with pytest.raises(TaskArgumentsError):
        app.run_batch("apps", task, [{"app_id": "a1"}, {"app_id": {1, object()}}], progress=False)
    _assert_nothing_written(app)


def test_same_task_id_with_other_arguments_is_a_conflict(app: Cairn) -> None:
    """Reusing a task id for different arguments raises TaskConflict; the original
    task and its history stay exactly as they were."""
    task = app.task(name="review")(_review)

    @app.task(name="audit")
    def audit(ctx: Context, app_id: str) -> str:
        return app_id

    assert app.run(task, task_id="t1", app_id="a1") == "a1"
    before = (app.store.get_task("t1"), app.store.load_history("t1"))
    with pytest.raises(TaskConflict, match="already belongs to task 'review'") as clash:
        app.run(task, task_id="t1", app_id="a2")
    assert clash.value.task_id == "t1"
    with pytest.raises(TaskConflict):
        app.run(audit, task_id="t1", app_id="a1")
    assert (app.store.get_task("t1"), app.store.load_history("t1")) == before


def test_same_batch_name_with_another_task_is_a_conflict(app: Cairn) -> None:
    """A batch belongs to one task function: enqueueing another into it is a
    TaskConflict and adds nothing."""
    task = app.task(name="review")(_review)

    @app.task(name="audit")
    def audit(ctx: Context, app_id: str) -> str:
        return app_id

    app.enqueue("apps", task, [{"app_id": "a1"}])
    with pytest.raises(TaskConflict, match=r"batch 'apps' runs task 'review', not 'audit'"):
        app.run_batch("apps", audit, [{"app_id": "a2"}], progress=False)
    assert [t.id for t in admin(app.store).list_tasks()] == ["apps/app_id=a1"]
    (summary,) = admin(app.store).batch_summaries()
    assert (summary.task_name, summary.total) == ("review", 1)
