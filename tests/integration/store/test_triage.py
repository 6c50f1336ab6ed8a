"""Triage at a glance: the task list's rows (duration, the step a task failed
in, its error's type and first line, a readable key for odd item keys) and the
failed tasks of a filter grouped by error type, each group a filter.

Every test here runs on each backend (the conformance suite).
"""

from __future__ import annotations

from cairn import Cairn, Context
from cairn.admin.listing import task_page
from cairn.admin.triage import ErrorGroup, error_groups, triage_rows
from cairn.clock import FakeClock
from cairn.store import admin
from cairn.store.reports import TaskQuery
from cairn.ui.config import UIConfig
from cairn.ui.pages import task as task_page_of
from cairn.ui.render import content

BATCH = "nightly"


def _run_batch(app: Cairn, clock: FakeClock) -> None:
    """Twelve tasks: six complete, four fail in analyze with a ValueError of two
    lines, two fail in fetch with a KeyError; and one whose arguments cairn must
    hash into its id (a slash and a space), failing in analyze."""

    @app.task(name="review")
    def review(ctx: Context, app_id: str) -> str:
        def fetch() -> str:
            clock.advance(2.0)
            if app_id.endswith("k"):
                raise KeyError(app_id)
            return app_id

        def analyze(text: str) -> str:
            clock.advance(3.0)
            if app_id.endswith("v") or " " in app_id:
                raise ValueError(f"bad findings for {app_id}\nsecond line, not shown")
            return text.upper()

        return str(ctx.step("analyze", analyze, ctx.step("fetch", fetch)))

    items = [f"ok{n}" for n in range(6)] + [f"{n}v" for n in range(4)] + ["1k", "2k"]
    items.append("odd/app name")
    app.run_batch(BATCH, review, [{"app_id": i} for i in items], concurrency=1, progress=False)


def test_failed_tasks_group_by_error_type_and_each_group_is_a_filter(
    any_app: Cairn, clock: FakeClock
) -> None:
    """The batch's failed tasks by error type, most first, counted by the
    store; choosing a group lists exactly its tasks; a search narrows the groups."""
    _run_batch(any_app, clock)
    store = admin(any_app.store)
    groups = error_groups(store, TaskQuery(batch=BATCH))
    assert groups == [ErrorGroup("builtins.ValueError", 5), ErrorGroup("builtins.KeyError", 2)]
    for group in groups:
        query = TaskQuery(batch=BATCH, status="failed", error_type=group.error_type)
        assert task_page(store, query).total == group.count
    assert error_groups(store, TaskQuery(batch=BATCH, search="1K")) == [
        ErrorGroup("builtins.KeyError", 1)
    ]
    assert error_groups(store, TaskQuery(batch="no such batch")) == []


def test_rows_show_duration_failing_step_error_line_and_a_readable_key(
    any_app: Cairn, clock: FakeClock
) -> None:
    """A failed task's row names the step it failed in, its error's type and the
    first line of its message only; a completed one shows how long it took; a
    task whose id cairn hashed shows its arguments as given."""
    _run_batch(any_app, clock)
    store = admin(any_app.store)
    page = task_page(store, TaskQuery(batch=BATCH), size=50)
    rows = {row.task.id: row for row in triage_rows(store, page.rows, clock.now())}
    ok = rows[f"{BATCH}/app_id=ok0"]
    assert ok.seconds == 5.0
    assert (ok.failed_step, ok.error_type, ok.in_flight) == (None, None, None)
    assert ok.key == "app_id=ok0"
    bad = rows[f"{BATCH}/app_id=0v"]
    assert bad.failed_step == "analyze"
    assert bad.error_type == "builtins.ValueError"
    assert bad.error_line == "bad findings for 0v"
    assert rows[f"{BATCH}/app_id=1k"].failed_step == "fetch"
    (odd,) = [row for row in rows.values() if "sha256:" in row.task.id]
    assert odd.key == "app_id=odd/app name"
    assert odd.failed_step == "analyze"


def test_after_a_retry_the_old_error_is_labelled_the_previous_attempts(
    any_app: Cairn, clock: FakeClock
) -> None:
    """A failed task's page says Error; once an operator retried it (pending
    again, its last error still recorded), the error is shown as the previous
    attempt's, with the status it has now."""
    _run_batch(any_app, clock)
    store = admin(any_app.store)
    config = UIConfig(store, clock.now)
    task_id = f"{BATCH}/app_id=0v"
    failed = content(task_page_of(config, {"id": task_id}))
    assert '<h2 id="error-heading">Error</h2>' in failed
    assert store.retry_task(task_id, clock.now())
    retried = content(task_page_of(config, {"id": task_id}))
    assert "Error of the previous attempt" in retried
    assert "(the task is pending now)" in retried
    assert "bad findings for 0v" in retried
