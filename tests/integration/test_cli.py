"""The ``cairn`` command line against real SQLite stores built through the public API.

One store is built per module (a batch ``reviews`` where ``bad`` fails with
``Permanent``, and a batch ``later`` of two pending tasks) and copied for each
test, so every test works on a database of its own.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from cairn import Cairn, Context, Permanent
from cairn.cli import app as cli_app
from cairn.clock import FakeClock
from cairn.store import Store, admin, open_store

FAILED_ID = "reviews/app_id=bad"
COMPLETED_ID = "reviews/app_id=a1"
PENDING_IDS = ("later/app_id=p1", "later/app_id=p2")
REFUSAL = "the model refused app bad"
# Environment that would change what the CLI reads or how Rich prints.
_ENV_TO_CLEAR = ("CAIRN_STORE", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS")


def _build_store(path: Path) -> None:
    """Run a small batch with one permanent failure, then enqueue two more tasks."""
    clock = FakeClock()
    app = Cairn(f"sqlite:///{path}", clock=clock)

    def fetch(app_id: str) -> dict[str, str]:
        clock.advance(1.5)
        return {"app_id": app_id}

    def judge(settings: dict[str, str]) -> str:
        clock.advance(0.25)
        if settings["app_id"] == "bad":
            raise Permanent(REFUSAL)
        return "fine"

    @app.task
    def review(ctx: Context, app_id: str) -> str:
        settings = ctx.step("fetch", fetch, app_id)
        return ctx.step("judge", judge, settings)

    items = [{"app_id": "a1"}, {"app_id": "a2"}, {"app_id": "bad"}]
    report = app.run_batch("reviews", review, items, concurrency=1, progress=False)
    assert (report.completed, report.failed) == (2, 1)
    app.enqueue("later", review, [{"app_id": "p1"}, {"app_id": "p2"}])
    app.close()


def _freeze(source: Path, target: Path) -> None:
    """Copy a live store into ``target`` as one self-contained WAL-mode file."""
    with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(target)) as dst:
        src.backup(dst)
        # WAL as cairn leaves it, so opening the copy never rewrites its header.
        dst.execute("PRAGMA journal_mode = WAL")


@pytest.fixture(scope="module")
def template_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The populated store, built once for the module and frozen into one file."""
    built = tmp_path_factory.mktemp("build") / "cairn.db"
    _build_store(built)
    template = tmp_path_factory.mktemp("template") / "cairn.db"
    _freeze(built, template)
    assert sorted(p.name for p in template.parent.iterdir()) == ["cairn.db"]
    return template


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No store from the outer environment, and plain (non-terminal) Rich output."""
    for name in _ENV_TO_CLEAR:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def db(template_store: Path, tmp_path: Path) -> Path:
    """A private copy of the populated store."""
    path = tmp_path / "store" / "cairn.db"
    path.parent.mkdir()
    shutil.copyfile(template_store, path)
    return path


@pytest.fixture
def url(db: Path) -> str:
    """The sqlite URL of the private store."""
    return f"sqlite:///{db}"


@pytest.fixture
def store(db: Path) -> Iterator[Store]:
    """The private store opened through the public API, to check what the CLI did."""
    opened = open_store(f"sqlite:///{db}")
    yield opened
    opened.close()


def cli(*args: str, env: dict[str, str] | None = None) -> Result:
    """Run ``cairn ARGS`` in-process and return its result."""
    return CliRunner().invoke(cli_app, list(args), env=env)


def row(output: str, first: str) -> list[str]:
    """The whitespace-split cells of the output line that starts with ``first``."""
    for line in output.splitlines():
        cells = line.split()
        if cells and cells[0] == first:
            return cells
    raise AssertionError(f"no row starting with {first!r} in:\n{output}")


def first_column(output: str) -> list[str]:
    """The first cell of every line after the header."""
    return [line.split()[0] for line in output.splitlines()[1:] if line.strip()]


def assert_clean_exit_2(result: Result, *words: str) -> None:
    """Exit code 2, one line on stderr naming ``words``, no traceback."""
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    for word in words:
        assert word in lines[0]


# -- batches ------------------------------------------------------------------------------


def test_batches_shows_counts_per_status(url: str) -> None:
    """`cairn batches` has a row per batch with counts per status, total and times."""
    result = cli("batches", "--store", url)
    assert result.exit_code == 0, result.output
    header = result.stdout.splitlines()[0].split()
    assert header[:8] == [
        "batch",
        "task",
        "pending",
        "running",
        "waiting",
        "completed",
        "failed",
        "cancelled",
    ]
    # name, task, pending, running, waiting, completed, failed, cancelled, total
    assert row(result.stdout, "reviews")[:9] == [
        "reviews",
        "review",
        "0",
        "0",
        "0",
        "2",
        "1",
        "0",
        "3",
    ]
    assert row(result.stdout, "later")[:9] == ["later", "review", "2", "0", "0", "0", "0", "0", "2"]
    # first start, last finish
    assert row(result.stdout, "reviews")[9:] == [
        "2026-05-24",
        "00:00:00Z",
        "2026-05-24",
        "00:00:05Z",
    ]
    assert row(result.stdout, "later")[9:] == ["-", "-"]


def test_batches_output_is_plain_when_not_a_terminal(url: str) -> None:
    """Off a terminal the table has no colour codes, no box lines, no trailing blanks."""
    result = cli("batches", "--store", url)
    assert "\x1b[" not in result.output
    assert "─" not in result.output
    assert all(line == line.rstrip() for line in result.stdout.splitlines())


def test_batches_json_parses(url: str) -> None:
    """`cairn batches --json` prints every status count and ISO 8601 times with offset."""
    result = cli("batches", "--store", url, "--json")
    assert result.exit_code == 0, result.output
    batches = {b["name"]: b for b in json.loads(result.stdout)}
    assert batches["reviews"]["counts"] == {
        "pending": 0,
        "running": 0,
        "waiting": 0,
        "completed": 2,
        "failed": 1,
        "cancelled": 0,
    }
    assert batches["reviews"]["total"] == 3
    assert batches["later"]["first_started_at"] is None
    started = datetime.fromisoformat(batches["reviews"]["first_started_at"])
    assert started.utcoffset() == timedelta(0)


# -- tasks --------------------------------------------------------------------------------


def test_tasks_lists_every_task_in_enqueue_order(url: str) -> None:
    """`cairn tasks` lists ids, statuses, attempts, times, durations and short errors."""
    result = cli("tasks", "--store", url)
    assert result.exit_code == 0, result.output
    assert first_column(result.stdout) == [
        COMPLETED_ID,
        "reviews/app_id=a2",
        FAILED_ID,
        *PENDING_IDS,
    ]
    failed = row(result.stdout, FAILED_ID)
    assert failed[1:3] == ["failed", "1"]
    assert "1.75s" in failed
    assert REFUSAL in " ".join(failed)
    assert row(result.stdout, PENDING_IDS[0])[1:3] == ["pending", "0"]


def test_tasks_filters_by_batch(url: str) -> None:
    """`--batch` shows only that batch's tasks."""
    result = cli("tasks", "--store", url, "--batch", "later")
    assert result.exit_code == 0, result.output
    assert first_column(result.stdout) == list(PENDING_IDS)


def test_tasks_filters_by_status(url: str) -> None:
    """`--status` shows only tasks in that status, and combines with `--batch`."""
    failed = cli("tasks", "--store", url, "--status", "failed")
    assert first_column(failed.stdout) == [FAILED_ID]
    none_pending = cli("tasks", "--store", url, "--batch", "reviews", "--status", "pending")
    assert none_pending.exit_code == 0
    assert none_pending.stdout == ""
    assert "no tasks match" in none_pending.stderr


def test_tasks_rejects_an_unknown_status(url: str) -> None:
    """An unknown `--status` exits 2 naming the five valid statuses."""
    result = cli("tasks", "--store", url, "--status", "done")
    assert_clean_exit_2(result, "'done'", "pending, running, waiting, completed, failed, cancelled")


def test_tasks_rejects_an_unknown_batch(url: str) -> None:
    """An unknown `--batch` exits 2 and lists the batches that exist."""
    result = cli("tasks", "--store", url, "--batch", "nope")
    assert_clean_exit_2(result, "'nope'", "reviews", "later")


def test_tasks_limit_says_when_more_exist(url: str) -> None:
    """`--limit N` shows N tasks and notes on stderr that more exist; 0 shows all."""
    limited = cli("tasks", "--store", url, "--limit", "2")
    assert first_column(limited.stdout) == [COMPLETED_ID, "reviews/app_id=a2"]
    assert "more exist" in limited.stderr
    exact = cli("tasks", "--store", url, "--limit", "5")
    assert len(first_column(exact.stdout)) == 5
    assert "more exist" not in exact.stderr
    everything = cli("tasks", "--store", url, "--limit", "0")
    assert len(first_column(everything.stdout)) == 5


def test_tasks_json_parses(url: str) -> None:
    """`cairn tasks --json` prints a list of task dicts with parsed errors."""
    result = cli("tasks", "--store", url, "--json", "--status", "failed")
    assert result.exit_code == 0, result.output
    (task,) = json.loads(result.stdout)
    assert task["id"] == FAILED_ID
    assert task["attempts"] == 1
    assert task["duration_seconds"] == pytest.approx(1.75)
    assert task["error"]["type"].endswith("Permanent")
    assert task["error"]["message"] == REFUSAL
    assert datetime.fromisoformat(task["finished_at"]).utcoffset() == timedelta(0)
    assert json.loads(cli("tasks", "--store", url, "--json", "-s", "running").stdout) == []


def test_store_comes_from_the_cairn_store_env_var(url: str) -> None:
    """With no --store, CAIRN_STORE names the store; --store still wins over it."""
    result = cli("tasks", "--batch", "later", env={"CAIRN_STORE": url})
    assert result.exit_code == 0, result.output
    assert first_column(result.stdout) == list(PENDING_IDS)
    overridden = cli("tasks", "--store", url, env={"CAIRN_STORE": "redis://elsewhere"})
    assert overridden.exit_code == 0, overridden.output


def test_reading_changes_no_file(db: Path, url: str) -> None:
    """batches, tasks and show (tables and JSON) leave the store's bytes and its
    directory exactly as they were."""
    before = db.read_bytes()
    for args in (("batches",), ("tasks",), ("show", FAILED_ID), ("tasks", "--json")):
        assert cli(*args, "--store", url).exit_code == 0
    assert db.read_bytes() == before
    assert sorted(p.name for p in db.parent.iterdir()) == ["cairn.db"]


# -- show ---------------------------------------------------------------------------------


def test_show_prints_the_header_and_step_timeline(url: str) -> None:
    """`cairn show` gives the task header and each step with status, duration and error."""
    result = cli("show", FAILED_ID, "--store", url)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert row(out, "task")[1] == FAILED_ID
    assert row(out, "batch")[1] == "reviews"
    assert row(out, "function")[1] == "review"
    assert row(out, "status")[1] == "failed"
    assert row(out, "attempts")[1] == "1"
    assert '{"app_id":"bad"}' in out
    assert REFUSAL in " ".join(row(out, "error"))
    # seq, kind, name, status, attempts, start (2 cells), duration (ms), error...
    fetch = row(out, "1")
    assert fetch[:5] == ["1", "step", "fetch", "completed", "1"]
    assert fetch[7] == "1500"
    judge = row(out, "2")
    assert judge[:5] == ["2", "step", "judge", "failed", "1"]
    assert judge[7] == "250"
    assert judge[8].endswith("Permanent:")
    assert " ".join(judge[9:]) == REFUSAL


def test_show_completed_task_prints_its_result(url: str) -> None:
    """A completed task's header shows its result and no error."""
    result = cli("show", COMPLETED_ID, "--store", url)
    assert row(result.stdout, "result") == ["result", '"fine"']
    assert "error" not in [line.split()[0] for line in result.stdout.splitlines() if line]


def test_show_running_task_names_owner_and_lease(url: str, store: Store) -> None:
    """A running task's header names the process that owns it and when its lease ends."""
    now = datetime.fromisoformat("2026-05-24T01:00:00+00:00")
    lease_until = now + timedelta(minutes=5)
    claimed = store.claim_next_pending("later", "host-x/4242/99/n0nce", lease_until, now)
    assert claimed is not None
    result = cli("show", claimed.id, "--store", url)
    assert row(result.stdout, "status")[1] == "running"
    assert row(result.stdout, "owner")[1] == "host-x/4242/99/n0nce"
    assert row(result.stdout, "lease")[1:] == ["until", "2026-05-24", "01:05:00Z"]
    assert "no steps recorded yet" in result.stdout


def test_show_json_parses(url: str) -> None:
    """`cairn show --json` gives the task with args and error, and the steps in order."""
    result = cli("show", FAILED_ID, "--store", url, "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["task"]["args"] == {"app_id": "bad"}
    assert shown["task"]["error"]["message"] == REFUSAL
    steps = shown["steps"]
    assert [(s["seq"], s["name"], s["status"]) for s in steps] == [
        (1, "fetch", "completed"),
        (2, "judge", "failed"),
    ]
    assert [s["duration_ms"] for s in steps] == [1500, 250]
    assert steps[1]["error"]["message"] == REFUSAL
    assert datetime.fromisoformat(steps[0]["started_at"]).utcoffset() == timedelta(0)


# -- retry --------------------------------------------------------------------------------


def test_retry_moves_a_failed_task_to_pending(url: str, store: Store) -> None:
    """`cairn retry TASK` makes a failed task pending with a fresh attempt budget."""
    result = cli("retry", FAILED_ID, "--store", url)
    assert result.exit_code == 0, result.output
    assert f"task {FAILED_ID}: failed -> pending" in result.stdout
    task = store.get_task(FAILED_ID)
    assert task is not None
    assert task.status == "pending"
    assert task.attempts - task.retry_base == 0
    listed = cli("tasks", "--store", url, "--status", "pending", "--batch", "reviews")
    assert row(listed.stdout, FAILED_ID)[1:3] == ["pending", "0"]
    shown = cli("show", FAILED_ID, "--store", url)
    assert " ".join(row(shown.stdout, "attempts")) == "attempts 0 since the last retry (1 in all)"
    assert REFUSAL in " ".join(row(shown.stdout, "last"))


def test_retry_batch_failed_moves_every_failed_task(url: str, store: Store) -> None:
    """`cairn retry --batch B --failed` retries the batch's failed tasks and only those."""
    result = cli("retry", "--batch", "reviews", "--failed", "--store", url)
    assert result.exit_code == 0, result.output
    assert FAILED_ID in result.stdout
    assert "batch reviews: 1 task(s) -> pending (1 failed)" in result.stdout
    statuses = {t.id: t.status for t in admin(store).list_tasks(batch="reviews")}
    assert statuses == {
        COMPLETED_ID: "completed",
        "reviews/app_id=a2": "completed",
        FAILED_ID: "pending",
    }


def test_retry_batch_cancelled_brings_cancelled_tasks_back(url: str, store: Store) -> None:
    """`--cancelled` retries cancelled tasks; a second run finds nothing and says so."""
    assert cli("cancel", "--batch", "later", "--store", url).exit_code == 0
    result = cli("retry", "--batch", "later", "--cancelled", "--store", url)
    assert result.exit_code == 0, result.output
    assert {t.status for t in admin(store).list_tasks(batch="later")} == {"pending"}
    again = cli("retry", "--batch", "later", "--cancelled", "--store", url)
    assert again.exit_code == 0
    assert "nothing changed" in again.stderr


@pytest.mark.parametrize(
    "args",
    [
        pytest.param((), id="neither"),
        pytest.param(("--batch", "reviews"), id="batch-without-which"),
        pytest.param((FAILED_ID, "--batch", "reviews", "--failed"), id="both"),
        pytest.param((FAILED_ID, "--failed"), id="task-with-flag"),
    ],
)
def test_retry_without_a_clear_target_is_a_usage_error(
    url: str, db: Path, args: tuple[str, ...]
) -> None:
    """`cairn retry` needs a TASK, or --batch with --failed/--cancelled; else exit 2."""
    before = db.read_bytes()
    result = cli("retry", *args, "--store", url)
    assert_clean_exit_2(result, "cairn retry")
    assert db.read_bytes() == before


def test_retry_of_a_completed_task_changes_nothing(url: str, store: Store) -> None:
    """Retrying a completed task exits 1 with the reason and leaves it completed."""
    result = cli("retry", COMPLETED_ID, "--store", url)
    assert result.exit_code == 1
    assert "is completed; only failed or cancelled tasks can be retried" in result.stderr
    task = store.get_task(COMPLETED_ID)
    assert task is not None
    assert task.status == "completed"


# -- cancel -------------------------------------------------------------------------------


def test_cancel_one_pending_task(url: str, store: Store) -> None:
    """`cairn cancel TASK` cancels a pending task and leaves its neighbours alone."""
    result = cli("cancel", PENDING_IDS[0], "--store", url)
    assert result.exit_code == 0, result.output
    assert f"task {PENDING_IDS[0]}: pending -> cancelled" in result.stdout
    statuses = {t.id: t.status for t in admin(store).list_tasks(batch="later")}
    assert statuses == {PENDING_IDS[0]: "cancelled", PENDING_IDS[1]: "pending"}


def test_cancel_batch_cancels_pending_and_running_tasks(url: str, store: Store) -> None:
    """`cairn cancel --batch B` cancels running and pending tasks; the running owner
    is told to stop at its next write (its fence moved)."""
    now = datetime.fromisoformat("2026-05-24T01:00:00+00:00")
    running = store.claim_next_pending("later", "host-x/4242/99/n0nce", now, now)
    assert running is not None
    result = cli("cancel", "--batch", "later", "--store", url)
    assert result.exit_code == 0, result.output
    assert f"task {running.id}: running -> cancelled (its process stops" in result.stdout
    assert "batch later: 2 task(s) -> cancelled (1 pending, 1 running)" in result.stdout
    assert {t.status for t in admin(store).list_tasks(batch="later")} == {"cancelled"}
    after = store.get_task(running.id)
    assert after is not None
    assert after.fence > running.fence


def test_cancel_of_a_failed_task_changes_nothing(url: str, store: Store) -> None:
    """Cancelling a finished task exits 1 and leaves it as it was."""
    result = cli("cancel", FAILED_ID, "--store", url)
    assert result.exit_code == 1
    assert "only pending, running or waiting tasks can be cancelled" in result.stderr
    task = store.get_task(FAILED_ID)
    assert task is not None
    assert task.status == "failed"


def test_cancel_needs_exactly_one_target(url: str) -> None:
    """`cairn cancel` with neither a TASK nor --batch (or with both) exits 2."""
    assert_clean_exit_2(cli("cancel", "--store", url), "cairn cancel TASK")
    assert_clean_exit_2(
        cli("cancel", FAILED_ID, "--batch", "later", "--store", url), "cairn cancel TASK"
    )


# -- bad input ----------------------------------------------------------------------------

_COMMANDS = [
    pytest.param(("batches",), id="batches"),
    pytest.param(("tasks",), id="tasks"),
    pytest.param(("show", FAILED_ID), id="show"),
    pytest.param(("retry", FAILED_ID), id="retry"),
    pytest.param(("cancel", PENDING_IDS[0]), id="cancel"),
]


def _text_file(path: Path) -> str:
    path.write_text("name,score\nada,3\n")
    return "not a SQLite database"


def _foreign_sqlite(path: Path) -> str:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users (name) VALUES ('ada')")
    conn.commit()
    conn.close()
    return "users"


def _newer_cairn(path: Path, template: Path) -> str:
    shutil.copyfile(template, path)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE cairn_meta SET value = '999' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    return "Upgrade cairn"


@pytest.mark.parametrize("command", _COMMANDS)
@pytest.mark.parametrize("kind", ["text-file", "foreign-sqlite", "newer-cairn", "empty-file"])
def test_a_file_that_is_not_a_usable_store_is_refused_untouched(
    tmp_path: Path, template_store: Path, command: tuple[str, ...], kind: str
) -> None:
    """Every command refuses a text file, another app's SQLite db, a store from a newer
    cairn and an empty file: exit 2, one line saying why, and no byte or file changed."""
    path = tmp_path / "given.db"
    if kind == "text-file":
        expected = _text_file(path)
    elif kind == "foreign-sqlite":
        expected = _foreign_sqlite(path)
    elif kind == "newer-cairn":
        expected = _newer_cairn(path, template_store)
    else:
        path.touch()
        expected = "empty"
    before = path.read_bytes()
    result = cli(*command, "--store", f"sqlite:///{path}")
    assert_clean_exit_2(result, expected, str(path.name))
    assert path.read_bytes() == before


def test_a_refused_store_gets_no_files_beside_it(tmp_path: Path, template_store: Path) -> None:
    """Refusing a store from a newer cairn (a WAL-mode file) leaves no -wal or -shm
    file beside it: the directory holds exactly what it held before."""
    path = tmp_path / "given.db"
    _newer_cairn(path, template_store)
    result = cli("tasks", "--store", f"sqlite:///{path}")
    assert result.exit_code == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["given.db"]


@pytest.mark.parametrize("command", _COMMANDS)
def test_an_unknown_url_scheme_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: tuple[str, ...]
) -> None:
    """A store URL with an unknown scheme exits 2 naming the scheme; no file appears."""
    monkeypatch.chdir(tmp_path)
    result = cli(*command, "--store", "redis://localhost/0")
    assert_clean_exit_2(result, "'redis'", "sqlite:///")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", _COMMANDS)
def test_a_missing_store_is_reported_and_not_created(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    """A store path that does not exist is reported with what to do; nothing is created."""
    path = tmp_path / "nowhere" / "cairn.db"
    result = cli(*command, "--store", f"sqlite:///{path}")
    assert_clean_exit_2(result, f"no cairn store at {path}", "--store", "CAIRN_STORE")
    assert not path.parent.exists()


def test_the_default_store_is_not_created_by_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no --store and no CAIRN_STORE, `cairn tasks` looks for ./.cairn/cairn.db and
    does not create it."""
    monkeypatch.chdir(tmp_path)
    result = cli("tasks")
    assert_clean_exit_2(result, str(tmp_path / ".cairn" / "cairn.db"))
    assert list(tmp_path.iterdir()) == []


def test_a_plain_path_names_a_store(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--store accepts a plain relative file path as well as a sqlite:/// URL."""
    monkeypatch.chdir(db.parent)
    result = cli("tasks", "--store", db.name, "--status", "failed")
    assert result.exit_code == 0, result.output
    assert first_column(result.stdout) == [FAILED_ID]


@pytest.mark.parametrize(
    "command",
    [
        ("show", "reviews/app_id=zz"),
        ("retry", "reviews/app_id=zz"),
        ("cancel", "reviews/app_id=zz"),
    ],
    ids=["show", "retry", "cancel"],
)
def test_an_unknown_task_id_exits_2(url: str, db: Path, command: tuple[str, ...]) -> None:
    """An unknown task id exits 2, names the id and points at `cairn tasks`."""
    before = db.read_bytes()
    result = cli(*command, "--store", url)
    assert_clean_exit_2(result, "'reviews/app_id=zz'", "cairn tasks")
    assert db.read_bytes() == before


def test_an_unknown_batch_for_retry_exits_2(url: str) -> None:
    """`cairn retry --batch` with a batch that does not exist exits 2."""
    assert_clean_exit_2(cli("retry", "--batch", "nope", "--failed", "--store", url), "'nope'")


# -- help ---------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["batches", "tasks", "show", "retry", "cancel"])
def test_help_shows_the_cairn_store_env_var(command: str) -> None:
    """Every store-reading command's --help names --store and CAIRN_STORE."""
    result = cli(command, "--help")
    assert result.exit_code == 0
    assert "--store" in result.stdout
    assert "CAIRN_STORE" in result.stdout


def test_top_level_help_lists_commands_and_env_var() -> None:
    """`cairn --help` lists every command and mentions CAIRN_STORE."""
    result = cli("--help")
    assert result.exit_code == 0
    for command in ("batches", "tasks", "show", "retry", "cancel", "demo"):
        assert command in result.stdout
    assert "CAIRN_STORE" in result.stdout
