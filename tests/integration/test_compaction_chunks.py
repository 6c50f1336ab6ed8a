"""A compaction folded in chunks: each answered chunk is recorded before the next
is sent, and a store that recorded a chunked compaction as one entry (cairn up
to commit 9caa681) still replays.

The summarizer's model is a local server (``tests/agent_server.py``), so every
request it gets is counted. The SIGKILLed version of the crash between chunks
is ``tests/acceptance/test_compaction_chunks_sigkill.py``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from cairn.agent.costs import cost_report
from cairn.clock import FakeClock
from tests.agent_server import Scripted, model_server, openai_client, resume
from tests.fixtures.chunked_compaction.make import (
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
