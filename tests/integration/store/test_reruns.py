"""A rerun from a step (``cairn.admin.reruns``, ``AdminStore.fork_task``): the new
run keeps every entry before the fork point and runs the rest with the current
code; the old run stays readable (lineage, its history, the diff); operations
follow the documented rule (docs/reruns.md). Every effect is counted at a real
HTTP server of the test's own.

Every test runs on SQLite and on PostgreSQL (``store_url``).
"""

from __future__ import annotations

import io
import json
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cairn import Cairn, Context, op_key
from cairn.admin.audit import Actor, audit_page
from cairn.admin.lineage import batch_diff, lineage, run_history, task_diff
from cairn.admin.reruns import ForkPoint, apply_rerun, plan_rerun, rerun_candidates
from cairn.blobs.in_store import referenced_blobs
from cairn.clock import FakeClock
from cairn.portable import export_batch, import_batch
from cairn.store import AdminStore, admin
from cairn.store.reports import TaskQuery
from cairn.testing.servers import ApiServer

BATCH = "reviews"
OPERATOR = Actor("cli", "mika")


@dataclass
class Review:
    """An app whose task fetches, analyzes (with a bug until ``fixed``), posts a
    receipt once before the fork point and applies once after it, each at the
    outside server, counted there."""

    app: Cairn
    server: ApiServer
    fixed: list[bool] = field(default_factory=lambda: [False])

    def calls(self) -> Counter[str]:
        return Counter(arrival.path.split("?")[0] for arrival in self.server.arrivals)


def _call(server: ApiServer, path: str) -> str:
    with urllib.request.urlopen(server.url + path, timeout=10) as answer:  # noqa: S310 - local
        answer.read()
    return path


def review_app(url: str, clock: FakeClock, server: ApiServer) -> Review:
    app = Cairn(url, clock=clock)
    review = Review(app, server)

    @app.task
    def review_app(ctx: Context, app_id: str) -> dict[str, Any]:
        page = ctx.step("fetch", lambda: _call(server, f"/fetch/{app_id}"))
        ctx.once(op_key("receipt", app_id), lambda key: _call(server, f"/receipt/{app_id}"))

        def analyze() -> int:
            _call(server, f"/analyze/{app_id}")
            return len(page) if review.fixed[0] else -1

        findings = ctx.step("analyze", analyze)
        ctx.once(op_key("apply", app_id), lambda key: _call(server, f"/apply/{app_id}"))
        ctx.once(ctx.run_key("report"), lambda key: _call(server, f"/report/{app_id}"))
        return {"app": app_id, "findings": findings}

    return review


@pytest.fixture
def review(store_url: str, clock: FakeClock) -> Iterator[Review]:
    with ApiServer() as server:
        built = review_app(store_url, clock, server)
        with built.app:
            yield built


def _run(review: Review, *apps: str) -> None:
    task = review.app.registered("review_app")
    review.app.run_batch(BATCH, task, [{"app_id": a} for a in apps], progress=False)


def _rerun_batch(store: AdminStore, point: ForkPoint, clock: FakeClock) -> Any:
    plan = plan_rerun(store, rerun_candidates(store, TaskQuery(batch=BATCH)), point)
    return plan, apply_rerun(store, plan, clock.now(), target=f"batch {BATCH}", actor=OPERATOR)


def test_a_rerun_from_a_step_keeps_what_came_before_and_runs_the_rest_again(
    review: Review, clock: FakeClock
) -> None:
    """After a batch completed with a bug in analyze, a rerun from analyze runs
    analyze and what follows with the fixed code and nothing before it: fetch
    and the receipt (an operation before the fork point) ran once per task in
    all, analyze twice; the apply keyed with op_key is found done and not called
    again; the report keyed with ctx.run_key is made again, once, in the new run."""
    _run(review, "a1", "a2")
    store = admin(review.app.store)
    assert [json.loads(t.result or "")["findings"] for t in store.list_tasks()] == [-1, -1]
    review.fixed[0] = True
    plan, done = _rerun_batch(store, ForkPoint(step="analyze"), clock)
    assert [t.task.id for t in done.forked] == [t.task.id for t in plan.runnable]
    assert len(done.forked) == 2
    assert not done.left
    assert {t.status for t in store.list_tasks()} == {"pending"}
    _run(review, "a1", "a2")
    calls = review.calls()
    for app_id in ("a1", "a2"):
        assert calls[f"/fetch/{app_id}"] == 1
        assert calls[f"/receipt/{app_id}"] == 1
        assert calls[f"/analyze/{app_id}"] == 2
        assert calls[f"/apply/{app_id}"] == 1  # op_key: the effect's own identity
        assert calls[f"/report/{app_id}"] == 2  # ctx.run_key: once per run
    results = {t.id: review.app.store.get_task(t.id) for t in store.list_tasks()}
    assert all(r is not None and r.status == "completed" and r.run == 2 for r in results.values())


def test_the_plan_says_what_would_repeat_and_which_operations_are_found_done(
    review: Review, clock: FakeClock
) -> None:
    """A dry run names the fork position, the entries that would run again, and
    the operation keys after the fork point the new run would find done (the
    op_key one, not the ctx.run_key one); it changes nothing."""
    _run(review, "a1")
    store = admin(review.app.store)
    (task,) = store.list_tasks()
    plan = plan_rerun(store, [task], ForkPoint(step="analyze"))
    (one,) = plan.runnable
    assert one.seq == 3  # fetch, receipt, analyze
    assert one.steps == ["analyze", "apply/a1", f"{task.id}#run1/report"]
    assert one.kept_operations == ["apply/a1"]
    assert store.get_task(task.id) == task  # nothing changed
    assert store.task_runs(task.id) == []


def test_the_old_run_stays_readable_lineage_history_and_diff(
    review: Review, clock: FakeClock
) -> None:
    """After the rerun ran, the task's lineage shows both runs (the first
    forked at analyze's position, by whom), the first run's history reads as
    it recorded it, and the diff lists analyze's output and the result as
    changed, the apply as found done, and the batch totals."""
    _run(review, "a1")
    store = admin(review.app.store)
    (task,) = store.list_tasks()
    first = dict(store.load_history(task.id))
    review.fixed[0] = True
    _rerun_batch(store, ForkPoint(step="analyze"), clock)
    _run(review, "a1")
    after = store.get_task(task.id)
    assert after is not None
    assert after.run == 2
    task = after
    runs = lineage(store, task)
    assert [(r.run, r.current, r.fork_seq, r.fork_name) for r in runs] == [
        (1, False, 3, "analyze"),
        (2, True, None, None),
    ]
    assert runs[0].forked_by == "cli:mika"
    assert runs[0].status == "completed"
    assert run_history(store, task, 1) == first
    diff = task_diff(store, task)
    assert diff is not None
    assert diff.result_changed
    # The report's key differs by its run number only: the same entry, same output.
    assert [(c.kind, c.name, c.change) for c in diff.changes] == [("step", "analyze", "changed")]
    assert diff.unchanged == 2  # the apply (found done) and the report
    assert diff.kept_operations == ["apply/a1"]
    totals = batch_diff(store, BATCH)
    assert [d.task.id for d in totals.tasks_changed] == [task.id]
    assert totals.results_changed == 1
    assert totals.unfinished == 0


def test_a_second_rerun_keeps_both_earlier_runs_readable(review: Review, clock: FakeClock) -> None:
    """Rerun from analyze, then again from the first position: runs 1, 2 and 3
    each read back as they recorded them, and fetch ran once per run it repeated."""
    _run(review, "a1")
    store = admin(review.app.store)
    (task,) = store.list_tasks()
    histories = [dict(store.load_history(task.id))]
    _rerun_batch(store, ForkPoint(step="analyze"), clock)
    review.fixed[0] = True
    _run(review, "a1")
    histories.append(dict(store.load_history(task.id)))
    _rerun_batch(store, ForkPoint(seq=1), clock)
    _run(review, "a1")
    third = store.get_task(task.id)
    assert third is not None
    assert third.run == 3
    task = third
    for run, recorded in enumerate(histories, start=1):
        assert run_history(store, task, run) == recorded
    assert review.calls()["/fetch/a1"] == 2  # run 3 forked before fetch
    assert review.calls()["/receipt/a1"] == 1  # op_key: found done even from position 1


def test_a_rerun_leaves_alone_tasks_it_cannot_rerun_and_says_why(
    review: Review, clock: FakeClock
) -> None:
    """A pending task, a task without the step, and a position past the end are
    left alone, each with a sentence; nothing is written for them."""
    store = admin(review.app.store)
    _run(review, "a1")
    (done,) = store.list_tasks()
    review.app.enqueue(BATCH, review.app.registered("review_app"), [{"app_id": "later"}])
    fresh = next(t for t in store.list_tasks() if t.status == "pending")
    plan = plan_rerun(store, [done, fresh], ForkPoint(step="nonesuch"))
    reasons = [t.skipped or "" for t in plan.skipped]
    assert "no entry named 'nonesuch'" in reasons[0]
    assert "is pending; only a finished task" in reasons[1]
    assert "no entry at 99" in (plan_rerun(store, [done], ForkPoint(seq=99)).tasks[0].skipped or "")
    assert store.task_runs(done.id) == []


def test_a_fork_of_a_run_that_moved_on_changes_nothing(review: Review, clock: FakeClock) -> None:
    """``fork_task`` forks only the run the caller looked at: asked for a run
    the task is no longer at (another rerun came first), it writes nothing."""
    _run(review, "a1")
    store = admin(review.app.store)
    (task,) = store.list_tasks()
    assert store.fork_task(task.id, task.run, 3, clock.now(), "cli:a")
    assert not store.fork_task(task.id, task.run, 3, clock.now(), "cli:b")
    (row,) = store.task_runs(task.id)
    assert row.forked_by == "cli:a"
    again = store.get_task(task.id)
    assert again is not None
    assert (again.run, again.status) == (2, "pending")


def test_a_rerun_is_one_entry_of_the_audit_trail(review: Review, clock: FakeClock) -> None:
    """The rerun of a batch is written once, as who made it, on what, with how
    many tasks it forked."""
    _run(review, "a1", "a2")
    store = admin(review.app.store)
    _rerun_batch(store, ForkPoint(step="analyze"), clock)
    (entry,) = audit_page(store).rows
    assert (entry.actor, entry.action, entry.target, entry.count) == (
        "cli:mika",
        "rerun",
        f"batch {BATCH}",
        2,
    )
    assert entry.detail is not None
    assert '"from": "analyze"' in entry.detail


def test_code_that_asks_for_another_entry_after_the_fork_point_is_not_held_to_the_old_one(
    store_url: str, clock: FakeClock
) -> None:
    """Where the old run completed an operation after the fork point, the new
    code may ask for a step instead: the superseded operation is not part of
    the new run's history, so nothing diverges."""
    asked = {"op": True}
    app = Cairn(store_url, clock=clock)

    @app.task
    def job(ctx: Context) -> str:
        ctx.step("first", lambda: 1)
        if asked["op"]:
            return str(ctx.once("effect/1", lambda key: "done"))
        return str(ctx.step("instead", lambda: "step"))

    with app:
        assert app.run(job, task_id="j") == "done"
        store = admin(app.store)
        task = store.get_task("j")
        assert task is not None
        plan = plan_rerun(store, [task], ForkPoint(seq=2))
        apply_rerun(store, plan, clock.now(), target="task j")
        asked["op"] = False
        assert app.run(job, task_id="j") == "step"
        assert [e.kind for _, e in sorted(app.store.load_history("j").items())] == ["step", "step"]


def test_a_blob_only_a_superseded_entry_refers_to_is_still_referenced(
    store_url: str, clock: FakeClock, tmp_path: Path
) -> None:
    """A step's large output went to the blob store; a rerun from that step
    supersedes its entry: backup, export and gc still find the blob among the
    store's references (the old run stays readable, its values too)."""
    with Cairn(store_url, clock=clock, blobs=str(tmp_path / "blobs"), inline_limit=1000) as app:

        @app.task
        def big(ctx: Context) -> int:
            return len(ctx.step("page", lambda: "x" * 5000))

        app.run(big, task_id="big")
        store = admin(app.store)
        (entry,) = store.load_history("big").values()
        assert (entry.output or "").startswith("!blob:")
        before = referenced_blobs(store)
        task = store.get_task("big")
        assert task is not None
        apply_rerun(store, plan_rerun(store, [task], ForkPoint(seq=1)), clock.now(), target="t")
        assert store.load_history("big") == {}
        assert referenced_blobs(store) == before != set()


def test_an_exported_batch_carries_its_runs_and_a_prune_deletes_them(
    review: Review, clock: FakeClock, tmp_path: Path
) -> None:
    """A batch rerun from analyze, exported and imported into a new SQLite
    store, reads the same lineage and old history there; pruned, none of its
    runs or superseded entries is left behind."""
    _run(review, "a1")
    store = admin(review.app.store)
    review.fixed[0] = True
    _rerun_batch(store, ForkPoint(step="analyze"), clock)
    _run(review, "a1")
    (task,) = store.list_tasks()
    out = io.StringIO()
    export_batch(store, None, BATCH, out)
    with Cairn(f"sqlite:///{tmp_path / 'copy.db'}", clock=clock) as copy:
        import_batch(copy.store, None, out.getvalue().splitlines(keepends=True))
        there = admin(copy.store)
        moved = there.get_task(task.id)
        assert moved is not None
        assert moved.run == 2
        assert lineage(there, moved) == lineage(store, task)
        assert run_history(there, moved, 1) == run_history(store, task, 1)
    store.delete_batch(BATCH)
    assert store.task_runs(task.id) == []
    assert store.superseded_entries(task.id) == []
