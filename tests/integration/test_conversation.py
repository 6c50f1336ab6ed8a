"""Durable conversations inside tasks: appends, replay, compaction, handoff.

The model is the fake OpenAI-compatible server of ``tests/agent_server.py``,
reached through the real openai SDK over HTTP on 127.0.0.1; it counts requests,
and every repeat of an identical request.

The tests on every backend are in ``store/test_conversation.py``.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from cairn import Cairn, Context, TaskFailed
from cairn.agent import (
    ExtractiveSummarizer,
    Summary,
    SummaryRequest,
    load_conversation,
    tool_result,
    user,
)
from cairn.agent._window import tool_pairs_intact
from cairn.agent.archive import export_jsonl
from cairn.agent.simulate import SimulatedModelServer
from cairn.agent.summarize import SUMMARY_HEADER
from cairn.clock import FakeClock
from cairn.store import admin
from cairn.testing import set_fault_hook
from tests.agent_server import (
    SYSTEM,
    Crash,
    DocReader,
    crash_at,
    model_server,
    openai_client,
    reader_task,
    resume,
)
from tests.integration.store.test_conversation import GOAL, history_entries
from tests.integration.store.test_conversation import (
    server as server,  # a fixture: pytest finds it by this name
)


def test_a_different_message_at_a_recorded_position_is_nondeterminism(app: Cairn) -> None:
    """Replaying into a recorded position with another message raises
    NonDeterminismError naming the conversation row; nothing is overwritten."""
    said = ["hello"]

    @app.task(name="talk", retry=None)
    def talk(ctx: Context) -> None:
        conv = ctx.conversation("main")
        conv.append(user(said[0]))
        raise ValueError("fail so that the next run replays")

    with pytest.raises(TaskFailed):
        app.run(talk, task_id="t")
    admin(app.store).retry_task("t", app.clock.now())
    said[0] = "goodbye"
    with pytest.raises(TaskFailed) as failed:
        app.run(talk, task_id="t")
    assert "NonDeterminismError" in failed.value.error["type"]
    assert "conversation 'main' row 0" in failed.value.error["message"]
    (row,) = app.store.load_messages("t", "main", 0, 10)
    assert json.loads(row.content)["content"] == "hello"


def test_the_resumed_context_is_the_one_the_agent_had(
    app: Cairn, db_path: Any, clock: FakeClock, server: SimulatedModelServer
) -> None:
    """After a crash mid-conversation, the reopened conversation's ``restored``
    context is the stored active context (system, latest summary, tail: part of
    the history is archived and not in it), and the first request the resumed
    agent sends starts with exactly that context."""
    client = openai_client(server)
    set_fault_hook(app, crash_at("after_llm", 11))
    with pytest.raises(Crash):
        app.run(reader_task(app, client), task_id="r", goal=GOAL)
    stored = load_conversation(app.store, "r")
    assert stored is not None
    assert stored.summary is not None
    assert stored.stats.rows > len(stored.messages)  # part of it is archived
    seen: list[list[dict[str, Any]]] = []
    restored: list[list[dict[str, Any]]] = []
    with resume(f"sqlite:///{db_path}", clock) as other:
        other.run(reader_task(other, client, seen=seen, restored=restored), task_id="r", goal=GOAL)
    assert restored == [stored.messages]
    assert stored.messages[0]["content"] == SYSTEM
    assert stored.messages[1]["content"].startswith(SUMMARY_HEADER)
    assert seen[0][: len(stored.messages)] == stored.messages
    assert server.repeats == 0


# -- compaction ---------------------------------------------------------------------------
class RecordingSummarizer:
    """The extractive summarizer, noting every request it gets."""

    name = "recording"

    def __init__(self) -> None:
        self.requests: list[SummaryRequest] = []
        self._inner = ExtractiveSummarizer(max_tokens=250)

    def __call__(self, request: SummaryRequest) -> Summary:
        self.requests.append(request)
        return self._inner(request)


def test_compaction_happens_when_the_context_crosses_the_threshold(
    app: Cairn, server: SimulatedModelServer
) -> None:
    """Before each call, a context over the threshold is compacted and never one
    under it; each compaction records tokens before (over the threshold) and after
    (below it), keeps at least keep_tail tokens, and is given the previous summary,
    so what was summarized before is carried on."""
    summarizer = RecordingSummarizer()
    client = openai_client(server)
    task = reader_task(app, client, threshold=700, keep_tail=250, summarizer=summarizer)
    app.run(task, task_id="r", goal=GOAL)
    compactions = history_entries(app, "r", "conv")
    calls = history_entries(app, "r", "llm")
    assert len(compactions) >= 3
    assert all(c["ok"] for c in compactions)
    for compaction in compactions:
        assert compaction["tokens_before"] > 700
        assert compaction["tokens_after"] < compaction["tokens_before"]
    assert summarizer.requests[0].previous is None
    for before, after in zip(summarizer.requests, summarizer.requests[1:], strict=False):
        assert after.previous is not None
        assert before.messages[0]["content"] != after.messages[0]["content"]
    # No call went out over the threshold with something left to fold.
    assert max(c["context_tokens"] for c in calls) <= 700
    rows = app.store.load_messages("r", "main", 0, 1000)
    summaries = [r for r in rows if r.kind == "summary"]
    assert len(summaries) == len(compactions)
    for summary in summaries:
        assert summary.covers_until is not None
        kept = [r for r in rows if summary.covers_until < r.idx < summary.idx]
        assert sum(r.tokens for r in kept if r.kind == "message") >= 250


def test_a_tool_call_and_its_results_are_never_split(app: Cairn) -> None:
    """Assistant messages calling one to three tools, each answered by results of
    very different sizes, compacted with a tiny keep_tail: every active context
    keeps each tool result right after the message that called it, and the
    system prompt first."""
    contexts: list[list[dict[str, Any]]] = []

    @app.task(name="tools")
    def tools(ctx: Context) -> None:
        conv = ctx.conversation("main", system=SYSTEM, threshold=300, keep_tail=30)
        conv.append(user(GOAL))
        for turn in range(40):
            width = 1 + turn % 3
            calls = [
                {
                    "id": f"c{turn}_{i}",
                    "type": "function",
                    "function": {"name": "look", "arguments": "{}"},
                }
                for i in range(width)
            ]
            conv.append({"role": "assistant", "content": None, "tool_calls": calls})
            for i in range(width):
                conv.append(tool_result(f"c{turn}_{i}", "x" * (5 + 97 * ((turn * 7 + i) % 5))))
            conv.compact()
            contexts.append(conv.messages)

    app.run(tools, task_id="t")
    assert len(history_entries(app, "t", "conv")) > 5
    for context in contexts:
        assert context[0] == {"role": "system", "content": SYSTEM}
        assert tool_pairs_intact(context[1:]), context
        assert context[2]["role"] != "tool"


def test_a_failing_summarizer_leaves_the_history_whole_and_is_retried(app: Cairn) -> None:
    """A summarizer that raises twice, then works: the failed compactions are
    recorded as failed, every call in the meantime gets the whole history, and
    compaction is tried again once the context has grown by keep_tail tokens
    after the first failure, twice that after the second, and then succeeds
    (the bound set high: under the default, the fallback folds before that)."""
    inner = ExtractiveSummarizer(max_tokens=250)
    failures = [2]

    def flaky(request: SummaryRequest) -> Summary:
        if failures[0]:
            failures[0] -= 1
            raise RuntimeError("summarizer down")
        return inner(request)

    with model_server(DocReader(30)) as server:
        task = reader_task(
            app, openai_client(server), summarizer=flaky, keep_tail=400, max_context=100_000
        )
        app.run(task, task_id="r", goal=GOAL)
    compactions = history_entries(app, "r", "conv")
    first, second, third = compactions[:3]
    assert [first["ok"], second["ok"], third["ok"]] == [False, False, True]
    assert first["error"] == "RuntimeError: summarizer down"
    assert first["hold_until"] == first["tokens_before"] + 400
    assert second["tokens_before"] >= first["hold_until"]
    assert second["hold_until"] == second["tokens_before"] + 800
    assert third["tokens_before"] >= second["hold_until"]
    assert third["misses"] == 0
    rows = app.store.load_messages("r", "main", 0, 1000)
    first_summary = next(r for r in rows if r.kind == "summary")
    calls = history_entries(app, "r", "llm")
    whole = [
        (b, c) for b, c in zip(server.bodies, calls, strict=True) if c["idx"] < first_summary.idx
    ]
    # Until the first summary, every request carried every message appended so
    # far, over the threshold after the failures.
    assert [len(body["messages"]) for body, call in whole] == [call["idx"] for _, call in whole]
    assert whole[-1][1]["context_tokens"] > 1200


def test_an_empty_summary_replaces_nothing(app: Cairn) -> None:
    """A summarizer that answers with blanks: the compaction is recorded as failed
    with the reason, no summary row is written, and the context (under its
    bound) stays whole."""

    @app.task(name="talk")
    def talk(ctx: Context) -> tuple[int, Any]:
        conv = ctx.conversation(
            "main", threshold=50, keep_tail=10, summarizer=lambda r: "  ", max_context=1000
        )
        for i in range(10):
            conv.append(user(f"message number {i} with some words in it"))
        outcome = conv.compact()
        return len(conv.messages), outcome.error if outcome else None

    assert app.run(talk, task_id="t") == (10, "the summarizer returned an empty summary")
    assert all(r.kind == "message" for r in app.store.load_messages("t", "main", 0, 100))


# -- the archive and handoff ------------------------------------------------------------------
def _chatter(ctx: Context, turns: int) -> dict[str, Any]:
    """Appends ``turns`` user messages to a small conversation, compacting as it goes."""
    conv = ctx.conversation("main", system=SYSTEM, threshold=120, keep_tail=40)
    for i in range(turns):
        conv.append(user(f"note {i}: the meeting moved to room {100 + i}, see plan-{i}.md"))
        conv.compact()
    return {
        "history": [(h.idx, h.kind) for h in conv.history()],
        "messages": [h.message for h in conv.history(include_summaries=False)],
        "active": len(conv.messages),
        "handoff": conv.handoff({"day": 1}),
    }


def test_the_compacted_head_stays_readable_and_exports_as_jsonl(app: Cairn) -> None:
    """After many compactions, conv.history() still holds every message ever
    appended, in order, with the summaries; the JSONL export of the stored rows
    has one line per row."""
    task = app.task(name="chatter")(_chatter)
    result = app.run(task, task_id="c", turns=30)
    assert result["active"] < 20
    assert len(result["messages"]) == 31
    assert [m["content"] for m in result["messages"][1:3]] == [
        "note 0: the meeting moved to room 100, see plan-0.md",
        "note 1: the meeting moved to room 101, see plan-1.md",
    ]
    kinds = [kind for _, kind in result["history"]]
    assert kinds.count("summary") >= 3
    assert [idx for idx, _ in result["history"]] == list(range(len(kinds)))
    from cairn.agent.archive import iter_history

    out = io.StringIO()
    assert export_jsonl(iter_history(app.store, "c", "main"), out) == len(kinds)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["kind"] for line in lines] == kinds
    last_message = next(line for line in reversed(lines) if line["kind"] == "message")
    assert "plan-29.md" in last_message["message"]["content"]


def test_handoff_round_trip_starts_a_day_two_task_from_the_compressed_state(
    app: Cairn,
) -> None:
    """Day 1's conv.handoff() is plain JSON with the summary, the tail and counts
    (and equals what the stored state gives); a Day 2 task started from it has the
    same active context and knows where it came from; its opening rows are
    written once and re-read on replay; a document that is not a handoff is refused."""
    task = app.task(name="chatter")(_chatter)
    doc = app.run(task, task_id="day1", turns=30)["handoff"]
    stored = load_conversation(app.store, "day1")
    assert stored is not None
    again = stored.handoff({"day": 1}, now=app.clock.now())
    assert {**again, "created_at": None} == {**doc, "created_at": None}
    assert doc["summary"]
    assert doc["counts"]["compactions"] >= 3
    assert doc["metadata"] == {"day": 1}
    runs = [0]

    @app.task(name="day2")
    def day2(ctx: Context, doc: dict[str, Any]) -> dict[str, Any]:
        conv = ctx.conversation("main", start_from=doc)
        runs[0] += 1
        if runs[0] == 1:
            raise ValueError("fail once, so the next attempt replays the opening")
        conv.append(user("Day 2 starts."))
        return {"messages": conv.messages, "from": conv.handed_off, "summary": conv.summary}

    second = app.run(day2, task_id="day2", doc=doc)
    assert second["messages"] == [*stored.messages, user("Day 2 starts.")]
    assert second["summary"] == stored.summary
    assert second["from"]["task_id"] == "day1"
    assert second["from"]["metadata"] == {"day": 1}
    rows = app.store.load_messages("day2", "main", 0, 100)
    assert len(rows) == len(stored.messages) + 1
    with pytest.raises(TaskFailed, match="not a cairn handoff"):
        app.run(day2, task_id="bad", doc={"summary": "x"})
    assert app.store.load_messages("bad", "main", 0, 100) == []


def test_fidelity_reports_agreement_and_lists_each_disagreement() -> None:
    """fidelity() compacts a history as a conversation would and asks a decision
    function with the full and the compressed history at the chosen turns: one
    that reads the latest tool result agrees everywhere; one that looks for a word
    said once early on (folded into the summary, which drops it) disagrees, and
    each disagreement is listed with its position and both answers."""
    from cairn.agent import fidelity
    from tests.agent_server import doc_text

    history: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        user("Read the documents."),
    ]
    for n in range(20):
        call = {"id": f"c{n}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
        history.append({"role": "assistant", "content": None, "tool_calls": [call]})
        secret = " The code word is PELICAN." if n == 0 else ""
        history.append(tool_result(f"c{n}", doc_text(n) + secret))
    history.append({"role": "assistant", "content": "done"})

    def latest_doc(messages: list[dict[str, Any]]) -> str:
        return str(messages[-1]["content"])[:6]

    def remembers_code_word(messages: list[dict[str, Any]]) -> bool:
        return any("PELICAN" in str(m.get("content")) for m in messages)

    summarizer = ExtractiveSummarizer(max_tokens=40)
    good = fidelity(history, summarizer, latest_doc, 5, threshold=800, keep_tail=300)
    assert good.probes == 5
    assert good.rate == 1.0
    assert good.disagreements == []
    bad = fidelity(history, summarizer, remembers_code_word, 5, threshold=800, keep_tail=300)
    assert bad.rate < 1.0
    first = bad.disagreements[0]
    assert (first.full, first.compressed) == (True, False)
    assert first.position in bad.positions
    assert first.compressed_tokens < first.full_tokens


def test_an_extend_holding_a_bad_message_writes_none_of_it(app: Cairn) -> None:
    """``conv.extend`` whose second message is not a chat message (an unknown
    role, a tool result without the call id it answers, a tool output holding a
    lone surrogate) raises, naming what is wrong, before anything is written:
    the good first message is not stored either, and the conversation goes on
    from where it was."""
    bad: list[tuple[dict[str, Any], str]] = [
        ({"role": "robot", "content": "beep"}, "message role must be one of"),
        ({"role": "tool", "content": "42"}, "needs the tool_call_id it answers"),
        (tool_result("call_1", "bytes \udcff decoded with surrogateescape"), "lone surrogate"),
    ]

    @app.task(name="talk")
    def talk(ctx: Context) -> list[str]:
        conv = ctx.conversation("main", system=SYSTEM)
        errors = []
        for message, _ in bad:
            try:
                conv.extend([user("fine"), message])
            except Exception as exc:  # noqa: BLE001 - each error is what is checked
                errors.append(str(exc))
        conv.append(user("still here"))
        return errors

    errors = app.run(talk, task_id="t")
    for error, (_, expected) in zip(errors, bad, strict=True):
        assert expected in error
    rows = app.store.load_messages("t", "main", 0, 10)
    assert [json.loads(r.content)["content"] for r in rows] == [SYSTEM, "still here"]
