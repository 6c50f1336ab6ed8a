"""Running a task that already failed says how to run it anew.

``app.run`` of a failed task returns its recorded failure and runs nothing: a
user who fixed the bug and runs it again must learn from the error itself that
``cairn retry TASK`` (or ``app.store.retry_task``) moves it back to pending.
The command the message gives is run as written, through the real CLI.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cairn import Cairn, Context, Retry, TaskDef, TaskFailed
from cairn.app import _how_to_run_anew
from cairn.cli import app as cli_app


class Api:
    """A stand-in for an outside API that is broken until it is fixed; counts calls."""

    def __init__(self) -> None:
        self.fixed = False
        self.calls = 0

    def fetch(self, app_id: str) -> str:
        self.calls += 1
        if not self.fixed:
            raise ValueError(f"no such app {app_id}")
        return f"settings of {app_id}"


def _review_app(store: Path, api: Api) -> tuple[Cairn, TaskDef[..., str]]:
    app = Cairn(f"sqlite:///{store}", task_retry=Retry(attempts=1))

    @app.task
    def review(ctx: Context, app_id: str) -> str:
        first = ctx.step("first", str.upper, app_id)
        return ctx.step("fetch", api.fetch, first)

    return app, review


def test_the_recorded_failure_names_cairn_retry_and_that_line_runs_it_anew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first failure says what failed; running the task again (after the
    fix) raises the recorded failure without calling anything, and its message
    gives `cairn retry TASK --store URL` and the Python call; the command, run
    as given, moves the task back to pending, and the next run completes it
    with its completed step replayed."""
    monkeypatch.chdir(tmp_path)
    api = Api()
    app, review = _review_app(tmp_path / "reviews.db", api)
    with app:
        with pytest.raises(TaskFailed) as first:
            app.run(review, app_id="a1", task_id="review-a1")
        assert "cairn retry" not in str(first.value)  # a fresh failure: just what failed
        api.fixed = True
        with pytest.raises(TaskFailed) as again:
            app.run(review, app_id="a1", task_id="review-a1")
        message = str(again.value)
        assert api.calls == 1  # the recorded failure came back; nothing was called
        assert message.startswith(
            "task 'review-a1' failed after 1 attempt(s): builtins.ValueError: no such app A1. "
            "That failure is recorded: running the task again returns it and runs nothing."
        )
        command = f"cairn retry review-a1 --store sqlite:///{tmp_path / 'reviews.db'}"
        assert f"`{command}`" in message
        assert "app.store.retry_task('review-a1', app.clock.now())" in message
        with pytest.raises(TaskFailed, match="cairn retry review-a1"):
            app.result("review-a1")

        retried = CliRunner().invoke(cli_app, shlex.split(command)[1:])
        assert retried.exit_code == 0, retried.output
        assert "task review-a1: failed -> pending" in retried.output

        assert app.run(review, app_id="a1", task_id="review-a1") == "settings of A1"
        assert api.calls == 2


def test_the_store_url_in_the_command_hides_its_password() -> None:
    """A PostgreSQL URL's password never appears in the message; the command is
    quoted for a shell where a task id needs it."""
    app = Cairn("postgresql://cairn:s3cret@db:5432/cairn?schema=jobs")
    hint = _how_to_run_anew("nightly/day=2026-05-24 x", app)
    assert "s3cret" not in hint
    assert (
        "`cairn retry 'nightly/day=2026-05-24 x' --store "
        "'postgresql://cairn:***@db:5432/cairn?schema=jobs'`"
    ) in hint
