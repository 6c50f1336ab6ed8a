"""Versions: each task records the app version it was enqueued under, a worker
with ``versions`` claims only those, and ``cairn versions`` warns about tasks no
running worker claims. Runs on SQLite and on PostgreSQL (``url``)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cairn import Cairn, Context
from cairn.cli import app as cli_app
from cairn.store import admin
from cairn.testing import set_fault_hook
from cairn.worker import Worker
from tests.crashes import Crash, crash_before
from tests.crashes import url as url  # a fixture: pytest finds it by this name


def versioned_app(url: str, version: str, ran: Counter[str], seen: list[list[str]]) -> Cairn:
    """An app at ``version`` whose task notes which version's code ran it, and
    which worker rows the store held while it ran."""
    app = Cairn(url, version=version)

    @app.task(name="review")
    def review(ctx: Context, n: int) -> str:
        ran[f"{version} ran {ctx.task_id}"] += 1
        rows = admin(app.store).workers_seen(datetime.now(UTC) - timedelta(minutes=1))
        seen.append([versions for _, versions in rows])
        return ctx.step("reviewed", lambda: f"{version}:{n}")

    return app


def test_each_task_records_its_version_and_a_given_one_is_kept(url: str) -> None:
    """Tasks enqueued by an app with version='v1' record v1; an app with no
    version= records one derived from its task code, the same for the same code."""
    ran: Counter[str] = Counter()
    with versioned_app(url, "v1", ran, []) as app:
        app.enqueue("b", app.registered("review"), [{"n": 1}])
        assert app.store.get_task("b/n=1").version == "v1"  # type: ignore[union-attr]
    plain = Cairn(url)

    @plain.task(name="other")
    def other(ctx: Context) -> int:
        return 1

    with plain:
        plain.enqueue("c", other, [{}])
        derived = plain.store.get_task("c/").version  # type: ignore[union-attr]
        assert derived == plain.version
    assert derived is not None
    assert derived.startswith("code-")


def test_two_workers_of_different_versions_each_claim_only_their_own_tasks(url: str) -> None:
    """Three tasks enqueued under v1 and three under v2: a v1 worker runs exactly
    the v1 tasks (the v2 ones stay pending), then a v2 worker runs the rest.
    While each ran, its row in the store named the versions it claims."""
    ran: Counter[str] = Counter()
    seen: list[list[str]] = []
    old = versioned_app(url, "v1", ran, seen)
    new = versioned_app(url, "v2", ran, seen)
    with old, new:
        old.enqueue("old", old.registered("review"), [{"n": n} for n in range(3)])
        new.enqueue("new", new.registered("review"), [{"n": n} for n in range(3)])
        first = Worker(old, burst=True, concurrency=1, versions=["v1"]).run()
        pending = [t.id for t in admin(old.store).list_tasks(status="pending")]
        second = Worker(new, burst=True, concurrency=1, versions=["v2"]).run()
        rows_after = admin(new.store).workers_seen(datetime.now(UTC) - timedelta(minutes=1))
    assert (first.completed, second.completed) == (3, 3)
    assert sorted(pending) == ["new/n=0", "new/n=1", "new/n=2"]
    assert ran == Counter(
        {f"v1 ran old/n={n}": 1 for n in range(3)} | {f"v2 ran new/n={n}": 1 for n in range(3)}
    )
    assert seen[:3] == [['["v1"]']] * 3
    assert seen[3:] == [['["v2"]']] * 3
    assert rows_after == []  # a stopped worker removes its row


def test_cairn_versions_counts_tasks_and_warns_about_an_unroutable_version(url: str) -> None:
    """Two versions in flight, one live worker claiming v1 only: `cairn versions`
    lists both with their task counts and warns that v2's tasks have no worker."""
    ran: Counter[str] = Counter()
    old = versioned_app(url, "v1", ran, [])
    new = versioned_app(url, "v2", ran, [])
    with old, new:
        old.enqueue("old", old.registered("review"), [{"n": n} for n in range(2)])
        new.enqueue("new", new.registered("review"), [{"n": n} for n in range(3)])
        old.store.note_worker("host/1/2/abc", '["v1"]', datetime.now(UTC))
    runner = CliRunner()
    as_json = runner.invoke(cli_app, ["versions", "--store", url, "--json"])
    assert as_json.exit_code == 0, as_json.output
    lines = {line["version"]: line for line in json.loads(as_json.stdout)["versions"]}
    assert lines["v1"]["tasks"] == 2
    assert lines["v1"]["workers"] == 1
    assert not lines["v1"]["unroutable"]
    assert lines["v2"]["counts"] == {"pending": 3}
    assert lines["v2"]["unroutable"]
    text = runner.invoke(cli_app, ["versions", "--store", url])
    assert "3 task(s) of version 'v2'" in text.stderr
    assert "--versions v2" in text.stderr
    assert "'v1'" not in text.stderr


WORKER_APP = """
import os

from cairn import Cairn, Context

app = Cairn(os.environ["VERSIONED_STORE"], version="v9")


@app.task(name="review")
def review(ctx: Context, n: int) -> str:
    return ctx.step("reviewed", lambda: f"v9:{n}")
"""


def test_cairn_worker_versions_current_claims_the_apps_own_version_only(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cairn worker MODULE:APP --versions current --burst` runs the tasks
    enqueued under MODULE:APP's version and leaves another version's pending."""
    (tmp_path / "versioned_app.py").write_text(WORKER_APP)
    monkeypatch.setenv("VERSIONED_STORE", url)
    monkeypatch.chdir(tmp_path)
    ran: Counter[str] = Counter()
    with versioned_app(url, "v9", ran, []) as mine, versioned_app(url, "v1", ran, []) as other:
        mine.enqueue("mine", mine.registered("review"), [{"n": 1}])
        other.enqueue("other", other.registered("review"), [{"n": 2}])
    result = CliRunner().invoke(
        cli_app, ["worker", "versioned_app:app", "--burst", "--versions", "current"]
    )
    assert result.exit_code == 0, result.output
    sys.modules.pop("versioned_app", None)
    with Cairn(url) as app:
        statuses = {t.id: t.status for t in admin(app.store).list_tasks()}
    assert statuses == {"mine/n=1": "completed", "other/n=2": "pending"}


def test_a_task_records_the_version_it_started_on_not_only_the_enqueuers(url: str) -> None:
    """Enqueued by a v1 app, started by a v2 app that claims any version: the
    task's version becomes v2 (the code that started it), and stays v2 when a
    later claim (here by the v1 app, after the task was handed back) resumes it."""
    ran: Counter[str] = Counter()
    with versioned_app(url, "v1", ran, []) as old, versioned_app(url, "v2", ran, []) as new:
        old.enqueue("b", old.registered("review"), [{"n": 1}])
        assert old.store.get_task("b/n=1").version == "v1"  # type: ignore[union-attr]
        set_fault_hook(new, crash_before("reviewed"))
        with pytest.raises(Crash):
            new.run(new.registered("review"), task_id="b/n=1", n=1)
        started = new.store.get_task("b/n=1")
        assert started is not None
        assert started.version == "v2"
        assert new.store.release_task("b/n=1", started.fence, datetime.now(UTC))
        assert old.run(old.registered("review"), task_id="b/n=1", n=1) == "v1:1"
        assert old.store.get_task("b/n=1").version == "v2"  # type: ignore[union-attr]
    assert ran == Counter({"v2 ran b/n=1": 1, "v1 ran b/n=1": 1})
