"""``cairn rerun``, ``cairn diff``, ``cairn audit``, the lineage in ``cairn show``
and ``cairn cancel --keep-children``, against a real SQLite store built by
running real tasks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from cairn import Cairn, Context, TaskWaiting
from cairn.cli import app as cli_app
from cairn.clock import FakeClock
from cairn.store import admin

BATCH = "reviews"
RUNS: dict[str, int] = {}


def _app(path: Path, fixed: bool) -> Cairn:
    app = Cairn(f"sqlite:///{path}", clock=FakeClock())

    @app.task
    def review(ctx: Context, app_id: str) -> dict[str, Any]:
        def fetch() -> str:
            RUNS[f"fetch {app_id}"] = RUNS.get(f"fetch {app_id}", 0) + 1
            return f"page of {app_id}"

        page = ctx.step("fetch", fetch)
        findings = ctx.step("analyze", lambda: len(page) if fixed else 0)
        ctx.once(f"apply/{app_id}", lambda key: key)
        return {"findings": findings}

    return app


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A store whose batch of three reviews completed with the bug in analyze."""
    for name in ("CAIRN_STORE", "COLUMNS", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)
    RUNS.clear()
    path = tmp_path / "cairn.db"
    with _app(path, fixed=False) as app:
        items = [{"app_id": a} for a in ("a1", "a2", "a3")]
        app.run_batch(BATCH, app.registered("review"), items, progress=False)
    return path


def cairn(path: Path, *args: str) -> Result:
    return CliRunner().invoke(cli_app, [*args, "--store", str(path)])


def _run_again(path: Path) -> None:
    with _app(path, fixed=True) as app:
        app.run_batch(BATCH, app.registered("review"), progress=False)


def test_a_dry_run_says_what_would_run_again_and_changes_nothing(store: Path) -> None:
    """``--dry-run`` lists each task, where it forks, what runs again, and the
    operation found done; the tasks stay completed and nothing is audited."""
    said = cairn(store, "rerun", "--batch", BATCH, "--from", "analyze", "--dry-run")
    assert said.exit_code == 0, said.output
    assert "reviews/app_id=a1 2 analyze analyze, apply/a1" in " ".join(said.output.split())
    assert "3 task(s) would be rerun --from analyze" in said.output
    assert "finds them done and does not call them again" in said.output
    with admin_of(store) as tools:
        assert {t.status for t in tools.list_tasks()} == {"completed"}
        assert tools.audit_page(None, 10) == []


class admin_of:  # noqa: N801 - used as a context manager, like open()
    """The store's admin side, closed on leaving."""

    def __init__(self, path: Path) -> None:
        self.app = Cairn(f"sqlite:///{path}")

    def __enter__(self) -> Any:
        return admin(self.app.store)

    def __exit__(self, *exc: object) -> None:
        self.app.close()


def test_rerun_then_diff_show_and_audit(store: Path) -> None:
    """A rerun of the batch from analyze, run with the fixed code: fetch ran
    once per task in all; ``cairn diff`` lists analyze and the result of every
    task as changed; ``cairn show`` shows both runs; ``cairn audit`` the action."""
    said = cairn(store, "rerun", "--batch", BATCH, "--from", "analyze")
    assert said.exit_code == 0, said.output
    assert "3 task(s) rerun --from analyze" in said.output
    _run_again(store)
    assert RUNS == {"fetch a1": 1, "fetch a2": 1, "fetch a3": 1}
    diff = cairn(store, "diff", "--batch", BATCH, "--json")
    assert diff.exit_code == 0, diff.output
    found = json.loads(diff.output)
    assert (found["tasks_changed"], found["results_changed"]) == (3, 3)
    for task in found["tasks"]:
        assert [c["name"] for c in task["changes"]] == ["analyze"]
        assert task["found_done"] == [f"apply/{task['task'].split('=')[1]}"]
    shown = cairn(store, "show", "reviews/app_id=a1")
    assert shown.exit_code == 0, shown.output
    assert "2 (a rerun from a step" in shown.output
    assert "1 completed" in " ".join(shown.output.split())
    assert "2 analyze" in shown.output
    audit = cairn(store, "audit", "--json")
    (entry,) = json.loads(audit.output)["entries"]
    assert (entry["action"], entry["target"], entry["count"]) == ("rerun", f"batch {BATCH}", 3)
    assert entry["actor"].startswith("cli:")


def test_one_task_by_position_and_the_refusals(store: Path) -> None:
    """``cairn rerun TASK --seq N`` reruns one task; a task never rerun has no
    diff (exit 1); bad usage says what to give (exit 2)."""
    assert cairn(store, "diff", "reviews/app_id=a2").exit_code == 1
    said = cairn(store, "rerun", "reviews/app_id=a2", "--seq", "1", "--json")
    assert said.exit_code == 0, said.output
    (task,) = json.loads(said.output)["tasks"]
    assert (task["position"], task["step"], task["rerun"]) == (1, "fetch", True)
    again = cairn(store, "rerun", "reviews/app_id=a2", "--seq", "1")
    assert again.exit_code == 1  # pending now: left alone, and said why
    assert "is pending; only a finished task" in again.output
    assert cairn(store, "rerun", "reviews/app_id=a2").exit_code == 2
    assert cairn(store, "rerun", "--batch", BATCH, "--from", "x", "--status", "ok").exit_code == 2


def test_cancel_reaches_children_unless_kept(tmp_path: Path) -> None:
    """``cairn cancel PARENT`` cancels the children it spawned (they wait for a
    signal); ``--keep-children`` cancels only the parent."""
    app = Cairn(f"sqlite:///{tmp_path / 'kids.db'}", clock=FakeClock())

    @app.task
    def child(ctx: Context) -> str:
        return str(ctx.wait_for("go").payload)

    @app.task
    def parent(ctx: Context) -> list[str]:
        return list(ctx.join([ctx.spawn(child, key=k) for k in ("x", "y")]))

    with app:
        for task_id in ("p", "q"):
            with pytest.raises(TaskWaiting):
                app.run(parent, task_id=task_id)
    path = tmp_path / "kids.db"
    kept = cairn(path, "cancel", "p", "--keep-children")
    assert kept.exit_code == 0, kept.output
    cascaded = cairn(path, "cancel", "q")
    assert "2 of its spawned tasks cancelled with it" in cascaded.output
    assert "task q/x: -> cancelled (spawned by q)" in cascaded.output
    with admin_of(path) as tools:
        statuses = {t.id: t.status for t in tools.list_tasks()}
    assert statuses == {
        "p": "cancelled",
        "p/x": "waiting",
        "p/y": "waiting",
        "q": "cancelled",
        "q/x": "cancelled",
        "q/y": "cancelled",
    }
