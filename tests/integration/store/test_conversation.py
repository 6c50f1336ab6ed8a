"""Durable conversations inside tasks: appends, replay, compaction, handoff.

The model is the fake OpenAI-compatible server of ``tests/agent_server.py``,
reached through the real openai SDK over HTTP on 127.0.0.1; it counts requests,
and every repeat of an identical request.

Every test here runs on each backend (the conformance suite).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from cairn import Cairn, Context, LeaseLost, TaskCancelled
from cairn.agent import ExtractiveSummarizer, Summary, SummaryRequest, user
from cairn.agent.simulate import SimulatedModelServer
from cairn.clock import FakeClock
from cairn.store import admin
from cairn.testing import set_fault_hook
from tests.agent_server import (
    ELSEWHERE,
    STALE,
    Crash,
    DocReader,
    crash_at,
    model_server,
    openai_client,
    reader_task,
    resume,
)

GOAL = "Read every document and report."


@pytest.fixture
def server() -> Iterator[SimulatedModelServer]:
    """The fake model: a reader of 12 documents."""
    with model_server(DocReader(12)) as started:
        yield started


def history_entries(app: Cairn, task_id: str, kind: str) -> list[dict[str, Any]]:
    history = app.store.load_history(task_id)
    return [json.loads(s.output or "null") for _, s in sorted(history.items()) if s.kind == kind]


# -- appends and replay ------------------------------------------------------------------
def test_appends_are_one_row_each_and_a_resumed_task_rereads_them(
    any_app: Cairn, store_url: str, clock: FakeClock
) -> None:
    """Each append writes one row at the next idx. A task that dies after three
    appends and runs again re-reads those rows (no second copy, the same
    messages) and appends only what is new."""
    crash = [True]

    @any_app.task(name="talk")
    def talk(ctx: Context) -> list[str]:
        conv = ctx.conversation("main", system="Be brief.")
        conv.append(user("one"))
        conv.append({"role": "assistant", "content": "two"})
        conv.append(user("three"))
        if crash[0]:
            raise Crash("the process dies here")
        conv.append(user("four"))
        return [str(m["content"]) for m in conv.messages]

    with pytest.raises(Crash):
        any_app.run(talk, task_id="t")
    crash[0] = False
    with resume(store_url, clock) as other:
        again = other.task(name="talk")(talk.fn)
        assert other.run(again, task_id="t") == ["Be brief.", "one", "two", "three", "four"]
        rows = other.store.load_messages("t", "main", 0, 100)
    assert [(r.idx, r.role) for r in rows] == [
        (0, "system"),
        (1, "user"),
        (2, "assistant"),
        (3, "user"),
        (4, "user"),
    ]
    assert json.loads(rows[2].content) == {"role": "assistant", "content": "two"}


def test_extend_writes_new_messages_together_and_replays_recorded_ones(
    any_app: Cairn, store_url: str, clock: FakeClock
) -> None:
    """``extend`` checks the messages the record holds (as append does) and writes
    the new ones in one transaction: a task whose fence moved before the write
    leaves none of them, and a resumed task re-reads a recorded pair and writes
    only the rest."""
    phase = ["cancel before the second pair"]

    @any_app.task(name="talk")
    def talk(ctx: Context) -> int:
        conv = ctx.conversation("main")
        conv.extend([user("q1"), {"role": "assistant", "content": "a1"}])
        if phase[0] == "cancel before the second pair":
            admin(any_app.store).cancel_task(ctx.task_id, clock.now())  # the fence moves
        conv.extend([user("q2"), {"role": "assistant", "content": "a2"}])
        return len(conv.messages)

    with pytest.raises(TaskCancelled):
        any_app.run(talk, task_id="t")
    written = any_app.store.load_messages("t", "main", 0, 100)
    assert [json.loads(r.content)["content"] for r in written] == ["q1", "a1"]
    phase[0] = "run through"
    assert admin(any_app.store).retry_task("t", clock.now())
    with resume(store_url, clock) as other:
        again = other.task(name="talk")(talk.fn)
        assert other.run(again, task_id="t") == 4
        rows = other.store.load_messages("t", "main", 0, 100)
    assert [(r.idx, json.loads(r.content)["content"]) for r in rows] == [
        (0, "q1"),
        (1, "a1"),
        (2, "q2"),
        (3, "a2"),
    ]


def test_replay_after_a_crash_sends_no_request_for_calls_that_returned(
    any_app: Cairn, store_url: str, clock: FakeClock, server: SimulatedModelServer
) -> None:
    """Killed right after its 7th model call was recorded, the agent resumes: the
    seven calls are read back from the record (no request sent again), compactions
    are replayed, and it finishes with what an uninterrupted run returns."""
    client = openai_client(server)
    set_fault_hook(any_app, crash_at("after_llm", 7))
    with pytest.raises(Crash):
        any_app.run(reader_task(any_app, client), task_id="r", goal=GOAL)
    assert server.requests == 7
    with resume(store_url, clock) as other:
        result = other.run(reader_task(other, client), task_id="r", goal=GOAL)
        calls = history_entries(other, "r", "llm")
    assert result == "Read all 12 documents. Done."
    assert server.requests == len(calls) == 13
    assert server.repeats == 0


def test_a_runner_that_lost_its_lease_while_compacting_writes_nothing_after(
    any_app: Cairn, store_url: str, clock: FakeClock, server: SimulatedModelServer
) -> None:
    """Runner A's lease runs out while its summarizer works on the first
    compaction, and runner B takes the task over and runs it to the end (its
    own compaction at the same point included). A's summary then comes back:
    A stops with ``LeaseLost`` at that write, and the store holds B's
    conversation alone: one summary per compaction, every position once, the
    same rows as a run never taken over; the model server got each of B's
    calls once (A's recorded calls replayed, none sent twice)."""
    runner_b = Cairn(store_url, clock=clock)
    runner_b.owner = ELSEWHERE
    client = openai_client(server)
    inner = ExtractiveSummarizer(max_tokens=250)
    finished: list[str] = []
    taken_over = [False]

    def summarize(request: SummaryRequest) -> Summary:
        if not taken_over[0]:  # A's first compaction
            taken_over[0] = True
            clock.advance(STALE)  # A's lease has lapsed: B may take the task
            finished.append(runner_b.run(task_b, task_id="r", goal=GOAL))
        return inner(request)

    task_b = reader_task(runner_b, client, summarizer=summarize)

    with runner_b, pytest.raises(LeaseLost):
        any_app.run(reader_task(any_app, client, summarizer=summarize), task_id="r", goal=GOAL)
    assert finished == ["Read all 12 documents. Done."]
    rows = any_app.store.load_messages("r", "main", 0, 1000)
    calls = history_entries(any_app, "r", "llm")
    assert [r.idx for r in rows] == list(range(len(rows)))
    summaries = [r for r in rows if r.kind == "summary"]
    assert len(summaries) == len(history_entries(any_app, "r", "conv")) >= 1
    assert (server.requests, server.repeats) == (len(calls), 0)
    with model_server(DocReader(12)) as fresh, Cairn(store_url, clock=clock) as clean_app:
        task = reader_task(clean_app, openai_client(fresh), summarizer=inner)
        clean_app.run(task, task_id="clean", goal=GOAL)
        clean = clean_app.store.load_messages("clean", "main", 0, 1000)
    assert [(r.kind, r.content) for r in rows] == [(r.kind, r.content) for r in clean]
