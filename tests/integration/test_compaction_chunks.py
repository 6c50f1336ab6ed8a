"""A compaction folded in chunks: each answered chunk is recorded before the next
is sent, and a store that recorded a chunked compaction as one entry (cairn up
to commit 9caa681) still replays.

The summarizer's model is a local server (``tests/agent_server.py``), so every
request it gets is counted. The SIGKILLed version of the crash between chunks
is ``tests/acceptance/test_compaction_chunks_sigkill.py``.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from cairn import Cairn, Context, TaskFailed
from cairn.agent import LLMSummarizer, Message, Summary, SummaryRequest, user
from cairn.agent.costs import cost_report
from cairn.agent.messages import text_of
from cairn.clock import FakeClock
from tests.agent_server import Scripted, model_server, openai_client, resume
from tests.fixtures.chunked_compaction.make import (
    NOTES,
    SQLITE_DUMP,
    SUMMARY,
    TASK,
    notes_task,
    summarizer,
)
from tests.integration.store.test_conversation import history_entries


def test_a_store_with_a_chunked_compaction_in_one_entry_replays_it(
    db_path: Path, clock: FakeClock
) -> None:
    """The store of ``tests/fixtures/chunked_compaction`` (its compaction folded
    in 8 requests and recorded as one entry, its task stopped right after it) is
    resumed by this build: the compaction is replayed from its entry (no
    request to the summarizer), the task goes on with the summary in its
    context, and ``cairn cost`` counts that compaction once, with the usage of
    its 8 requests as recorded."""
    connection = sqlite3.connect(db_path)
    connection.executescript(SQLITE_DUMP.read_text())
    connection.close()
    with (
        model_server(Scripted([SUMMARY])) as summarizer_server,
        model_server(Scripted(["Noted."])) as agent_server,
    ):
        with resume(f"sqlite:///{db_path}", clock) as app:
            task = notes_task(
                app, summarizer(openai_client(summarizer_server)), openai_client(agent_server)
            )
            result = app.run(task, task_id=TASK)
            (compaction,) = history_entries(app, TASK, "conv")
            total = cost_report(app.store, task_id=TASK).total
        assert (summarizer_server.requests, agent_server.requests) == (0, 1)
        assert "Goal: read." in str(agent_server.bodies[0]["messages"])
    assert result == {"ok": True, "summary": SUMMARY, "reply": "Noted."}
    assert (total.compactions, total.failed_compactions) == (1, 0)
    recorded = compaction["usage"]
    assert total.summarizer_usage.input_tokens == recorded["input_tokens"] > 0
    assert total.summarizer_usage.output_tokens == recorded["output_tokens"] > 0


class Crash(BaseException):
    """Stands for the process dying between two requests."""


def _crashing_client(server: Any, before: int, *, is_async: bool = False) -> Any:
    """An openai client on ``server`` that 'dies' just before sending its
    ``before``-th request (once)."""
    sent = [0]

    def count(request: httpx2.Request) -> None:
        sent[0] += 1
        if sent[0] == before:
            raise Crash(f"killed before request {before}")

    async def acount(request: httpx2.Request) -> None:
        count(request)

    if is_async:
        http: Any = openai.DefaultAsyncHttpxClient(event_hooks={"request": [acount]})
        return openai.AsyncOpenAI(
            base_url=server.base_url, api_key="-", max_retries=0, http_client=http
        )
    http = openai.DefaultHttpxClient(event_hooks={"request": [count]})
    return openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=0, http_client=http)


def _async_notes(app: Cairn, summarizer: LLMSummarizer) -> Any:
    """The notes task of the fixture, async, with an async summarizer."""

    @app.task(name="notes", retry=None)
    async def notes(ctx: Context) -> dict[str, Any]:
        conv = ctx.conversation(
            "main", threshold=4000, keep_tail=500, summarizer=summarizer, summary_tokens=200
        )
        for i in range(NOTES):
            conv.append(user(f"note {i}: " + "the data says something. " * 80))
        done = await conv.compact()
        return {"ok": done.ok, "summary": conv.summary}

    return notes


def test_an_async_summarizer_crashed_between_chunks_sends_only_the_rest(
    app: Cairn, db_path: Path, clock: FakeClock
) -> None:
    """With an async client, 'killed' just before the fourth chunk's request:
    the resumed task replays the three answered parts and sends the other five,
    none twice, and keeps the summary; cost counts the eight requests once."""
    with model_server(Scripted([SUMMARY])) as server:
        crashing = summarizer(_crashing_client(server, 4, is_async=True))
        with pytest.raises(Crash):
            app.run(_async_notes(app, crashing), task_id=TASK)
        assert server.requests == 3
        with resume(f"sqlite:///{db_path}", clock) as other:
            task = _async_notes(other, summarizer(openai_client(server, is_async=True)))
            result = other.run(task, task_id=TASK)
            total = cost_report(other.store, task_id=TASK).total
        assert (server.requests, server.repeats) == (8, 0)
        assert _notes_sent(server.bodies) == list(range(NOTES - 1))  # each folded once
        counted = (server.prompt_tokens, server.completion_tokens)
    assert result == {"ok": True, "summary": SUMMARY}
    assert (total.compactions, total.failed_compactions) == (1, 0)
    assert (total.summarizer_usage.input_tokens, total.summarizer_usage.output_tokens) == counted


def test_a_summarizer_window_changed_after_the_crash_folds_only_the_rest(
    app: Cairn, db_path: Path, clock: FakeClock
) -> None:
    """'Killed' before the third chunk's request, and resumed by code whose
    summarizer has a window twice as big: the two answered parts are replayed,
    the rest of the head (from the row after the last one they folded) is
    chunked by the new window, and nothing is asked twice; the head is folded
    whole (the summary covers it)."""
    agent = openai_client  # the task's own model call goes to the same server
    with model_server(Scripted([SUMMARY])) as server:
        crashing = _crashing_client(server, 3)
        with pytest.raises(Crash):
            app.run(notes_task(app, summarizer(crashing), agent(server)), task_id=TASK)
        assert server.requests == 2
        bigger = LLMSummarizer(openai_client(server), model="s", max_tokens=100, window=4000)
        with resume(f"sqlite:///{db_path}", clock) as other:
            result = other.run(notes_task(other, bigger, agent(server)), task_id=TASK)
            *parts, compaction = history_entries(other, TASK, "conv")
        bodies = server.bodies
    assert _notes_sent(bodies[:-1]) == list(range(NOTES - 1))  # each folded once
    assert server.repeats == 0
    # 2 parts in windows of 2,000 tokens, then the other notes in windows of 4,000.
    assert 2 + 2 <= len(parts) < 8
    assert len(bodies) == len(parts) + 1  # and the task's own model call
    assert result["ok"]
    assert compaction["covers_until"] == parts[-1]["through"]


def _notes_sent(bodies: list[dict[str, Any]]) -> list[int]:
    """The notes the summarizer's requests carried, in order, repeats included."""
    texts = [str(body["messages"][1]["content"]) for body in bodies]
    return [int(n) for text in texts for n in re.findall(r"note (\d+):", text)]


def _notes_kept(app: Cairn, summarizer: Any, keep_tail: int) -> Any:
    """The notes task's compaction alone, keeping ``keep_tail`` tokens."""

    @app.task(name="notes", retry=None)
    def notes(ctx: Context) -> bool:
        conv = ctx.conversation(
            "main", threshold=4000, keep_tail=keep_tail, summarizer=summarizer, summary_tokens=200
        )
        for i in range(NOTES):
            conv.append(user(f"note {i}: " + "the data says something. " * 80))
        return bool(conv.compact().ok)

    return notes


def test_parts_that_folded_rows_the_code_now_keeps_stop_the_task_by_name(
    app: Cairn, db_path: Path, clock: FakeClock
) -> None:
    """'Killed' before the last chunk, and resumed by code that keeps a tail of
    2,500 tokens instead of 500: the recorded parts folded rows the new head
    does not hold, so going on would summarize messages the context keeps too.
    The task stops with a NonDeterminismError naming the part and the rows, and
    asks the summarizer nothing."""
    with model_server(Scripted([SUMMARY])) as server:
        with pytest.raises(Crash):
            app.run(_notes_kept(app, summarizer(_crashing_client(server, 8)), 500), task_id=TASK)
        with resume(f"sqlite:///{db_path}", clock) as other:
            task = _notes_kept(other, summarizer(openai_client(server)), 2500)
            with pytest.raises(TaskFailed, match="NonDeterminismError"):
                other.run(task, task_id=TASK)
            stored = other.store.get_task(TASK)
        assert server.requests == 7
    assert stored is not None
    assert re.search(r"compact main: part \d folding the head through row \d+", str(stored.error))


class Pairs:
    """A summarizer of one's own that folds two messages a request, counting
    the messages each request folds (``folded``)."""

    is_async = False

    def __init__(self, broken: bool = False) -> None:
        self.folded: list[str] = []
        self.broken = broken
        self.broken_pairs = [[user("note 0: a")], [user("note 1: b")]]

    def chunks(self, request: SummaryRequest) -> list[list[Message]]:
        messages = list(request.messages)
        pairs = [messages[i : i + 2] for i in range(0, len(messages), 2)]
        if self.broken:
            # A bug of its own: the first two pairs, then nothing for the rest.
            pairs, self.broken_pairs = self.broken_pairs, []
        return pairs

    def fold_chunk(self, request: SummaryRequest) -> Summary:
        self.folded += [text_of(m).split(":")[0] for m in request.messages]
        if len(self.folded) == 6 and not self.broken:
            raise Crash("killed after the third pair")
        return Summary(f"{request.previous or ''} +{len(request.messages)}".strip())

    def __call__(self, request: SummaryRequest) -> Summary:
        raise AssertionError("a chunked summarizer is asked chunk by chunk")


def test_a_summarizer_of_ones_own_gets_its_chunks_recorded(
    app: Cairn, db_path: Path, clock: FakeClock
) -> None:
    """Any summarizer with ``chunks`` and ``fold_chunk`` (a ChunkedSummarizer)
    has each chunk recorded: 'killed' while folding its third pair, the resumed
    task folds the third pair and the rest, each note once in all."""
    pairs = Pairs()
    with pytest.raises(Crash):
        app.run(_notes_kept(app, pairs, 500), task_id=TASK)
    with resume(f"sqlite:///{db_path}", clock) as other:
        assert other.run(_notes_kept(other, pairs, 500), task_id=TASK) is True
    folded = [int(note.split()[1]) for note in pairs.folded]
    assert folded == [0, 1, 2, 3, 4, 5, *range(4, NOTES - 1)]  # the third pair was never answered


def test_a_summarizer_whose_chunks_leave_messages_out_fails_by_name(app: Cairn) -> None:
    """A ChunkedSummarizer whose ``chunks`` gives nothing for messages it was
    asked to split stops the task with an error naming it."""
    with pytest.raises(TaskFailed, match=r"Pairs\.chunks gave no chunk"):
        app.run(_notes_kept(app, Pairs(broken=True), 500), task_id=TASK)
