"""The admin API (``cairn.admin``) over a real store: listings with filters,
keyset pages both ways with totals, task and batch views, operations, signals
and the CLI commands that stand on them.

Every test runs on SQLite and on PostgreSQL (``any_app``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from typer.testing import CliRunner

from cairn import Cairn, Context, Permanent, TaskFailed, TaskWaiting
from cairn.admin import (
    BadCursor,
    TaskQuery,
    batch_page,
    batch_view,
    iter_tasks,
    listing,
    metrics_summary,
    operations,
    resolve,
    send_signal,
    task_page,
    task_view,
)
from cairn.cli import app as cli
from cairn.clock import FakeClock
from cairn.store import AdminStore, admin
from cairn.task import TaskDef

ITEMS = range(1, 13)
ALERT = "cairn.observe.alert"


@dataclass
class Listed:
    """Two batches of twelve review tasks an hour apart, and one of cairn's own
    tasks an hour later. Items 5 and 10 fail with a quota error holding ``%``
    and ``_``, item 7 with plain text; each fetch step takes n seconds."""

    app: Cairn
    store: AdminStore
    review: TaskDef[..., Any]
    start: datetime


def _ids(batch: str, items: range | list[int]) -> list[str]:
    return [f"{batch}/n={n}" for n in items]


@pytest.fixture
def listed(any_app: Cairn, clock: FakeClock) -> Listed:
    @any_app.task(retry=None)
    def review(ctx: Context, n: int) -> int:
        ctx.step(f"fetch-{n}", clock.advance, float(n))
        if n % 5 == 0:
            raise Permanent(f"Refused_{n}% of quota")
        if n == 7:
            raise ValueError("PLAIN text")
        return n

    @any_app.task(name=ALERT)
    def alert(ctx: Context) -> str:
        return "sent"

    start = clock.now()
    for batch in ("alpha", "beta"):
        any_app.run_batch(batch, review, [{"n": n} for n in ITEMS], concurrency=1, progress=False)
        clock.advance(3600)
    any_app.run(alert, task_id="stall-alert")
    return Listed(any_app, admin(any_app.store), review, start)


def _all_pages(store: AdminStore, query: TaskQuery, size: int) -> list[list[str]]:
    pages, cursor = [], None
    while True:
        page = task_page(store, query, older_than=cursor, size=size)
        pages.append([t.id for t in page.rows])
        assert page.total == sum(1 for _ in store.find_tasks(query, size=1000))
        if page.older is None:
            return pages
        cursor = page.older


# -- listings ------------------------------------------------------------------------
def test_cairns_own_tasks_are_hidden_unless_asked_for(listed: Listed) -> None:
    """The alert task is neither listed nor counted, nor among the completed,
    unless ``include_internal``."""
    assert task_page(listed.store, TaskQuery()).total == 24
    completed = task_page(listed.store, TaskQuery(status="completed"))
    assert "stall-alert" not in [t.id for t in completed.rows]
    everything = task_page(listed.store, TaskQuery(include_internal=True))
    assert everything.total == 25
    assert everything.rows[0].id == "stall-alert"
    assert task_page(listed.store, TaskQuery(name=ALERT, include_internal=True)).total == 1


def test_filters_by_status_batch_name_and_time(listed: Listed) -> None:
    """Each filter alone and together, with the total of what they pick."""

    def ids(query: TaskQuery) -> list[str]:
        page = task_page(listed.store, query)
        assert page.total == len(page.rows)
        return [t.id for t in page.rows]

    assert ids(TaskQuery(status="failed")) == _ids("beta", [10, 7, 5]) + _ids("alpha", [10, 7, 5])
    assert ids(TaskQuery(status="failed", batch="alpha")) == _ids("alpha", [10, 7, 5])
    assert len(ids(TaskQuery(name="review"))) == 24
    assert ids(TaskQuery(name="nothing")) == []
    hour = timedelta(minutes=30)
    assert set(ids(TaskQuery(since=listed.start + hour))) == set(_ids("beta", ITEMS))
    assert set(ids(TaskQuery(until=listed.start + hour))) == set(_ids("alpha", ITEMS))


def test_search_matches_part_of_an_id_a_name_or_error_text_in_any_case(listed: Listed) -> None:
    """An id start or any part of an id; a task name in another case; a piece
    of the error in another case; LIKE's ``%`` and ``_`` in the search mean
    themselves."""

    def ids(search: str) -> set[str]:
        return {t.id for t in task_page(listed.store, TaskQuery(search=search)).rows}

    assert ids("alpha/n=1") == set(_ids("alpha", [1, 10, 11, 12]))
    assert ids("alpha/n=7") == {"alpha/n=7"}
    assert ids("plain TEXT") == set(_ids("alpha", [7]) + _ids("beta", [7]))
    assert ids("%") == set(_ids("alpha", [5, 10]) + _ids("beta", [5, 10]))
    assert ids("d_1") == {"alpha/n=10", "beta/n=10"}
    assert ids("no such thing") == set()
    assert ids("/N=12") == {"alpha/n=12", "beta/n=12"}
    assert len(ids("EVIE")) == 24


def test_a_search_total_is_exact_on_one_page_and_capped_past_it(
    listed: Listed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search whose matches fit one page is counted by that page; past a page
    its total is counted up to SEARCH_COUNT and then said to be "at least"."""
    page = task_page(listed.store, TaskQuery(search="review"), size=30)
    assert (page.total, page.total_capped) == (24, False)
    monkeypatch.setattr(listing, "SEARCH_COUNT", 10)
    page = task_page(listed.store, TaskQuery(search="review"), size=5)
    assert (page.total, page.total_capped) == (10, True)
    older = task_page(listed.store, TaskQuery(search="n=1"), size=2, older_than=page.older)
    assert (older.total, older.total_capped) == (8, False)


def test_pages_go_older_and_back_newer_with_the_same_total(listed: Listed) -> None:
    """Pages of 5 over 24 tasks: newest first, every task once; walking back
    newer from the last page gives the same pages; ends have no cursor."""
    newest_first = _ids("beta", range(12, 0, -1)) + _ids("alpha", range(12, 0, -1))
    pages = _all_pages(listed.store, TaskQuery(), 5)
    assert [len(p) for p in pages] == [5, 5, 5, 5, 4]
    assert [i for p in pages for i in p] == newest_first
    first = task_page(listed.store, TaskQuery(), size=5)
    assert first.newer is None
    page = first
    for _ in range(4):
        assert page.older is not None
        page = task_page(listed.store, TaskQuery(), older_than=page.older, size=5)
    assert page.older is None
    back: list[list[str]] = [[t.id for t in page.rows]]
    while page.newer is not None:
        page = task_page(listed.store, TaskQuery(), newer_than=page.newer, size=5)
        assert page.total == 24
        back.append([t.id for t in page.rows])
    assert back[::-1] == pages


def test_filtered_pages_cross_their_boundary(listed: Listed) -> None:
    """Failed tasks two a page: three pages, then back to the first."""
    pages = _all_pages(listed.store, TaskQuery(status="failed"), 2)
    assert [len(p) for p in pages] == [2, 2, 2]
    second = task_page(listed.store, TaskQuery(status="failed"), size=2)
    assert second.older is not None
    middle = task_page(listed.store, TaskQuery(status="failed"), older_than=second.older, size=2)
    assert middle.newer is not None
    assert middle.older is not None
    again = task_page(listed.store, TaskQuery(status="failed"), newer_than=middle.newer, size=2)
    assert [t.id for t in again.rows] == pages[0]
    assert again.newer is None


def test_a_cursor_that_no_page_gave_is_refused(listed: Listed) -> None:
    """A made-up cursor, or one of the batch listing, is a clear BadCursor; an
    unknown status, a page size out of range or a time without an offset a
    clear ValueError."""
    with pytest.raises(BadCursor, match="start again from the first page"):
        task_page(listed.store, TaskQuery(), older_than="not-a-cursor")
    batches = batch_page(listed.store, size=1)
    assert batches.older is not None
    with pytest.raises(BadCursor):
        task_page(listed.store, TaskQuery(), older_than=batches.older)
    with pytest.raises(ValueError, match="unknown task status 'done'; use one of: pending"):
        task_page(listed.store, TaskQuery(status="done"))
    with pytest.raises(ValueError, match="a page holds 1 to 1000 rows; 0 asked for"):
        task_page(listed.store, TaskQuery(), size=0)
    with pytest.raises(ValueError, match=r"TaskQuery.since 2026-05-24T00:00:00 has no UTC offset"):
        task_page(listed.store, TaskQuery(since=datetime(2026, 5, 24)))


def test_batch_index_pages_both_ways_and_searches(listed: Listed, clock: FakeClock) -> None:
    """Seven batches three a page (two made at the same moment, ordered by
    name), older then newer, with totals; search picks by name in any case."""
    for name in ("gamma", "delta-2", "delta-1", "epsilon", "zeta"):
        listed.app.enqueue(name, listed.review, [{"n": 1}])
        if name != "delta-2":
            clock.advance(60)
    newest_first = ["zeta", "epsilon", "delta-2", "delta-1", "gamma", "beta", "alpha"]
    pages, cursor = [], None
    while True:
        page = batch_page(listed.store, older_than=cursor, size=3)
        assert page.total == 7
        pages.append([b.name for b in page.rows])
        if page.older is None:
            break
        cursor = page.older
    assert pages == [newest_first[:3], newest_first[3:6], newest_first[6:]]
    assert page.newer is not None
    middle = batch_page(listed.store, newer_than=page.newer, size=3)
    assert [b.name for b in middle.rows] == newest_first[3:6]
    searched = batch_page(listed.store, search="DELTA")
    assert [b.name for b in searched.rows] == ["delta-2", "delta-1"]
    assert searched.total == 2
    assert batch_page(listed.store, size=3).rows[1].counts == {"pending": 1}


# -- views ---------------------------------------------------------------------------
def test_task_view_parses_the_error_and_shows_each_step(listed: Listed) -> None:
    """A failed task: its error's type, message and traceback; its arguments as
    pretty JSON; its fetch step with the recorded output."""
    view = task_view(listed.store, "alpha/n=5")
    assert view is not None
    assert view.error is not None
    assert view.error.type.endswith("Permanent")
    assert view.error.message == "Refused_5% of quota"
    assert view.error.traceback is not None
    assert "Traceback" in view.error.traceback
    assert view.arguments is not None
    assert view.arguments.json_text == '{\n  "n": 5\n}'
    assert view.result is None
    (step,) = view.steps
    assert (step.kind, step.name, step.status) == ("step", "fetch-5", "completed")
    assert step.output is not None
    assert step.output.json_text == "null"
    assert view.attempts == 1
    assert view.interruptions == 0
    assert view.children == []
    assert task_view(listed.store, "no-such-task") is None


def test_spawn_steps_link_their_children(any_app: Cairn) -> None:
    """A parent's spawn rows name the child each started; the view lists them."""

    @any_app.task
    def child(ctx: Context, n: int) -> int:
        return n

    @any_app.task
    def parent(ctx: Context) -> int:
        handles = [ctx.spawn(child, key=f"c{n}", n=n) for n in (1, 2)]
        return sum(ctx.join(handles))

    assert any_app.run(parent, task_id="p") == 3
    view = task_view(admin(any_app.store), "p")
    assert view is not None
    spawned = [s.child_task_id for s in view.steps if s.kind == "spawn"]
    assert len(spawned) == 2
    assert None not in spawned
    assert view.children == spawned
    child_view = task_view(admin(any_app.store), str(spawned[0]))
    assert child_view is not None
    assert child_view.task.parent_id == "p"


def test_batch_view_counts_rates_failures_and_slowest_steps(
    listed: Listed, clock: FakeClock
) -> None:
    """Every status counted; failures grouped by type with an example; steps
    grouped by template; rate over the time since the first start, ETA for
    the tasks left."""
    listed.app.enqueue("alpha", listed.review, [{"n": 13}, {"n": 14}])
    view = batch_view(listed.store, "alpha", clock.now())
    assert view is not None
    assert view.counts == {
        "pending": 2,
        "running": 0,
        "waiting": 0,
        "completed": 9,
        "failed": 3,
        "cancelled": 0,
    }
    assert (view.total, view.done) == (14, 12)
    assert [(f.error_type.rsplit(".", 1)[-1], f.count) for f in view.failures] == [
        ("Permanent", 2),
        ("ValueError", 1),
    ]
    assert view.failures[0].example_task_id == "alpha/n=5"
    assert view.failures[0].example_message == "Refused_5% of quota"
    (fetch,) = view.slowest_steps
    assert (fetch.name, fetch.count, fetch.max_seconds, fetch.median_seconds) == (
        "fetch-*",
        12,
        12.0,
        6.5,
    )
    # 12 done in the 78 s of steps and the hour before beta's run and the alert.
    minutes = (clock.now() - listed.start).total_seconds() / 60
    assert view.rate_per_minute == pytest.approx(12 / minutes)
    assert view.eta_seconds == pytest.approx(2 / (12 / minutes) * 60)
    assert batch_view(listed.store, "nope", clock.now()) is None


def test_metrics_summary_groups_numbered_steps(listed: Listed, clock: FakeClock) -> None:
    """24 steps fetch-1 … fetch-12 are one line, not twelve."""
    summary = metrics_summary(listed.store, now=clock.now())
    assert [(g.name, g.count) for g in summary.metrics.steps] == [("fetch-*", 24)]
    assert summary.metrics.tasks_by_status["failed"] == 6


# -- operations and signals ------------------------------------------------------------
def test_resolve_answers_with_the_clis_sentences(any_app: Cairn, clock: FakeClock) -> None:
    """A failed key released: the key's sentence, then its task's; a completed
    key refused; an unknown key not found."""

    def charge(*_: object) -> str:
        raise Permanent("card declined")

    @any_app.task(retry=None)
    def pay(ctx: Context) -> str:
        return str(ctx.once("charge-1", charge))

    with pytest.raises(TaskFailed):
        any_app.run(pay, task_id="p")
    store = admin(any_app.store)
    (listed,) = operations(store, now=clock.now())
    assert (listed.record.status, listed.in_doubt, listed.claimant_gone) == ("failed", False, False)
    assert listed.waiting is None  # its error says more
    done = resolve(
        store, "", "charge-1", "completed", result={"ok": 1}, permanent=False, now=clock.now()
    )
    assert done.changed
    assert done.messages == [
        "operation 'charge-1': failed -> completed (result {\"ok\":1}; later calls return it "
        "without calling the function)",
        "task p: failed -> pending; the next app.run of this task runs it again",
    ]
    again = resolve(store, "", "charge-1", "released", permanent=False, now=clock.now())
    assert not again.changed
    assert again.found
    assert again.message == (
        "operation 'charge-1' is completed already; a completed key cannot be resolved. "
        "Nothing changed."
    )
    missing = resolve(store, "", "nope", "released", permanent=False, now=clock.now())
    assert not missing.found
    assert missing.message.startswith("no operation nope in ")


def test_send_signal_answers_with_the_clis_sentences(any_app: Cairn, clock: FakeClock) -> None:
    """Sent; sent again (the first stands); to a finished or unknown task: refused."""

    @any_app.task
    def gated(ctx: Context) -> Any:
        return ctx.wait_for("go").payload

    with pytest.raises(TaskWaiting):
        any_app.run(gated, task_id="w")
    store = admin(any_app.store)
    sent = send_signal(store, "w", "go", {"ok": True}, clock.now())
    assert (sent.changed, sent.refused, sent.message) == (True, False, "sent 'go' to task w")
    twice = send_signal(store, "w", "go", {"ok": False}, clock.now())
    assert (twice.changed, twice.refused) == (False, False)
    assert twice.message == "task w already had a 'go' signal; the first one stands"
    assert any_app.run(gated, task_id="w") == {"ok": True}
    finished = send_signal(store, "w", "later", None, clock.now())
    assert finished.refused
    assert finished.message.startswith("task 'w' is completed; it waits for no signal")
    assert finished.message.endswith("Nothing changed.")
    assert send_signal(store, "nobody", "go", None, clock.now()).refused


# -- the CLI on the admin API ----------------------------------------------------------
def _cli(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def test_cairn_tasks_filters_hides_internal_and_pages(listed: Listed, store_url: str) -> None:
    """--all shows cairn's own tasks; --search and --name filter; --newest
    pages with the total and the cursor of the next page, in JSON too."""
    plain = _cli("tasks", "--store", store_url, "--json")
    assert "stall-alert" not in [t["id"] for t in json.loads(plain.stdout)]
    everything = _cli("tasks", "--store", store_url, "--all", "--json")
    assert json.loads(everything.stdout)[-1]["id"] == "stall-alert"
    searched = _cli("tasks", "--store", store_url, "--search", "plain", "--json")
    assert [t["id"] for t in json.loads(searched.stdout)] == ["alpha/n=7", "beta/n=7"]
    named = _cli("tasks", "--store", store_url, "--name", ALERT, "--internal", "--json")
    assert [t["id"] for t in json.loads(named.stdout)] == ["stall-alert"]
    page = _cli("tasks", "--store", store_url, "--newest", "-n", "10", "--json")
    first = json.loads(page.stdout)
    assert (len(first["tasks"]), first["total"], first["newer"]) == (10, 24, None)
    older = _cli("tasks", "--store", store_url, "--older-than", first["older"], "-n", "10")
    assert older.exit_code == 0, older.output
    assert "10 of 24 matching task(s), newest first" in older.stderr
    assert "older: add --older-than " in older.stderr
    assert "newer: add --newer-than " in older.stderr
    bad = _cli("tasks", "--store", store_url, "--older-than", "junk")
    assert bad.exit_code == 2
    assert "start again from the first page" in bad.stderr


def test_cairn_tasks_since_and_until(listed: Listed, store_url: str) -> None:
    """--since and --until take ISO times; a bad one names the option."""
    middle = (listed.start + timedelta(minutes=30)).isoformat()
    since = _cli("tasks", "--store", store_url, "--since", middle, "--json")
    assert {t["id"] for t in json.loads(since.stdout)} == set(_ids("beta", ITEMS))
    until = _cli("tasks", "--store", store_url, "--until", middle, "--json")
    assert {t["id"] for t in json.loads(until.stdout)} == set(_ids("alpha", ITEMS))
    bad = _cli("tasks", "--store", store_url, "--until", "tomorrow")
    assert bad.exit_code == 2
    assert "--until 'tomorrow' is not a time" in bad.stderr


def test_cairn_batches_batch_shows_its_progress(listed: Listed, store_url: str) -> None:
    """`cairn batches alpha`: done of total, failures by type, slowest steps."""
    shown = _cli("batches", "alpha", "--store", store_url)
    assert shown.exit_code == 0, shown.output
    assert "12 of 12 (9 completed, 3 failed)" in shown.stdout
    assert "alpha/n=5" in shown.stdout
    assert "Refused_5% of quota" in shown.stdout
    as_json = json.loads(_cli("batches", "alpha", "--store", store_url, "--json").stdout)
    assert as_json["failures"][0]["count"] == 2
    assert as_json["slowest_steps"][0]["name"] == "fetch-*"
    missing = _cli("batches", "nope", "--store", store_url)
    assert missing.exit_code == 2
    assert "no batch named 'nope'" in missing.stderr


def test_cairn_show_names_spawned_children(any_app: Cairn, store_url: str) -> None:
    """`cairn show` lists a parent's children and names each spawn's child."""

    @any_app.task
    def child(ctx: Context) -> int:
        return 1

    @any_app.task
    def parent(ctx: Context) -> int:
        return sum(ctx.join([ctx.spawn(child, key="only")]))

    any_app.run(parent, task_id="p")
    (child_id,) = admin(any_app.store).child_ids("p")
    shown = _cli("show", "p", "--store", store_url)
    assert shown.exit_code == 0, shown.output
    assert f"-> {child_id}" in shown.stdout
    detail = json.loads(_cli("show", "p", "--store", store_url, "--json").stdout)
    assert detail["task"]["children"] == [child_id]
    assert [s["child_task_id"] for s in detail["steps"] if s["kind"] == "spawn"] == [child_id]


def test_streamed_tasks_cross_many_pages_while_an_action_writes(
    any_app: Cairn, store_url: str
) -> None:
    """iter_tasks reads 500 at a time in enqueue order, with a limit or without;
    `cairn cancel --batch` changes every task once (in one statement), naming
    the first 20 in enqueue order and counting the rest; `cairn retry --batch
    --cancelled` brings them all back the same way."""

    @any_app.task
    def job(ctx: Context, n: int) -> int:
        return n

    count = 1_050
    any_app.enqueue("big", job, [{"n": n} for n in range(count)])
    store = admin(any_app.store)
    every = [t.item_key for t in iter_tasks(store, TaskQuery(batch="big"))]
    assert every == [f"n={n}" for n in range(count)]
    assert len(list(iter_tasks(store, TaskQuery(), limit=501))) == 501
    cancelled = _cli("cancel", "--batch", "big", "--store", store_url)
    assert cancelled.exit_code == 0, cancelled.output
    assert f"batch big: {count} task(s) -> cancelled ({count} pending)" in cancelled.stdout
    named = [
        line.split()[1].rstrip(":")
        for line in cancelled.stdout.splitlines()
        if line.startswith("task ")
    ]
    assert named == [f"big/n={n}" for n in range(20)]
    assert f"... and {count - 20} more" in cancelled.stdout
    assert task_page(store, TaskQuery(status="cancelled")).total == count
    retried = _cli("retry", "--batch", "big", "--cancelled", "--store", store_url)
    assert f"batch big: {count} task(s) -> pending ({count} cancelled)" in retried.stdout
    assert task_page(store, TaskQuery(status="pending")).total == count
