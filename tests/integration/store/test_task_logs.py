"""Logs per task: what a task logs through the ``logging`` module while it runs
is kept with it (each record with its attempt), redacted as errors are,
bounded per task with the rest counted, and shown by ``cairn logs`` and the
task's view; records logged elsewhere are not kept.

Every test here runs on each backend (the conformance suite).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from cairn import Cairn, Context, Retry
from cairn.admin.logs import task_logs
from cairn.cli import app as cli_app
from cairn.engine.tasklogs import MAX_LINES
from cairn.redaction import register_secret
from cairn.store import admin

SECRET = "pw-9f8e7d6c5b4a39281706"


@pytest.fixture
def info_logger() -> Iterator[logging.Logger]:
    """A program logger at INFO (the root logger stays at WARNING)."""
    logger = logging.getLogger("reviewer")
    logger.setLevel(logging.INFO)
    yield logger
    logger.setLevel(logging.NOTSET)


def test_records_are_kept_per_attempt_redacted_and_shown(
    store_url: str, info_logger: logging.Logger
) -> None:
    """A task that logs, fails its first attempt and completes its second keeps
    its records in order with their attempt and level, the secret it logged
    replaced; a record logged outside any task, and one below the logger's
    level, are not kept; `cairn logs` prints them, and its --json says the same."""
    register_secret(SECRET)
    app = Cairn(store_url, task_retry=Retry(attempts=2, initial_delay=0))

    @app.task(name="review")
    def review(ctx: Context) -> str:
        attempt = 1 if ctx.step("first", lambda: True) and not seen else 2
        seen.append(attempt)
        info_logger.info("fetched %d findings (attempt %d)", 3, attempt)
        info_logger.debug("below the logger's level: not a record")
        if attempt == 1:
            info_logger.warning("token %s refused", SECRET)
            raise ValueError("first attempt fails")
        return "ok"

    seen: list[int] = []
    with app:
        info_logger.info("outside any task")
        assert app.run(review, task_id="t/1") == "ok"
        view = task_logs(admin(app.store), "t/1")
    assert [(x.attempt, x.level, x.logger) for x in view.lines if x.logger == "reviewer"] == [
        (1, "INFO", "reviewer"),
        (1, "WARNING", "reviewer"),
        (2, "INFO", "reviewer"),
    ]
    messages = [x.message for x in view.lines]
    assert "fetched 3 findings (attempt 1)" in messages
    assert not [m for m in messages if SECRET in m]
    assert not [m for m in messages if "outside any task" in m or "below" in m]
    assert view.dropped == 0
    shown = CliRunner().invoke(cli_app, ["logs", "t/1", "--store", store_url])
    assert shown.exit_code == 0, shown.output
    assert "attempt 2 INFO reviewer: fetched 3 findings (attempt 2)" in shown.stdout
    assert SECRET not in shown.stdout
    as_json = CliRunner().invoke(cli_app, ["logs", "t/1", "--store", store_url, "--json"])
    assert json.loads(as_json.stdout)["not_kept"] == 0
    unknown = CliRunner().invoke(cli_app, ["logs", "no/such", "--store", store_url])
    assert unknown.exit_code == 2
    assert "no/such" in unknown.output


def test_a_task_keeps_a_bounded_number_and_counts_the_rest(
    store_url: str, info_logger: logging.Logger
) -> None:
    """A task logging past the bound keeps MAX_LINES records, the first ones, and
    counts the rest; `cairn logs` says how many were not kept; tasks of one batch
    on four threads each keep only their own records."""
    app = Cairn(store_url)

    @app.task(name="chatty")
    def chatty(ctx: Context, n: int) -> int:
        for i in range(n):
            info_logger.info("task %d record %d", n, i)
        return n

    with app:
        items = [{"n": MAX_LINES + 100}, {"n": 3}, {"n": 4}, {"n": 5}]
        report = app.run_batch("talk", chatty, items, concurrency=4, progress=False)
        assert report.completed == 4
        store = admin(app.store)
        big = task_logs(store, f"talk/n={MAX_LINES + 100}")
        small = task_logs(store, "talk/n=4")
    assert len(big.lines) == MAX_LINES
    assert big.dropped == 100
    assert big.lines[0].message == f"task {MAX_LINES + 100} record 0"
    assert [x.message for x in small.lines] == [f"task 4 record {i}" for i in range(4)]
    shown = CliRunner().invoke(cli_app, ["logs", f"talk/n={MAX_LINES + 100}", "--store", store_url])
    assert "100 more record(s) not kept" in shown.output


def test_keeping_logs_changes_nothing_of_where_records_go(store_url: str) -> None:
    """Running a task adds no handler to the root logger (a program that set up
    no logging still gets Python's last-resort warnings on stderr), and a
    logger that does not propagate still has its records kept."""
    quiet = logging.getLogger("reviewer.quiet")
    quiet.propagate = False
    quiet.setLevel(logging.INFO)
    before = list(logging.getLogger().handlers)
    app = Cairn(store_url)

    @app.task(name="quiet")
    def quiet_task(ctx: Context) -> int:
        quiet.info("kept though it does not propagate")
        return 1

    try:
        with app:
            app.run(quiet_task, task_id="q/1")
            view = task_logs(admin(app.store), "q/1")
    finally:
        quiet.propagate = True
        quiet.setLevel(logging.NOTSET)
    assert logging.getLogger().handlers == before
    assert [x.message for x in view.lines] == ["kept though it does not propagate"]
