"""A store made by a real run that compacts, for the tests of what cost and
saving the dashboard shows (``cairn cost``'s figures): a batch of two
note-taking agents on the local model server, and a reading agent with tools
(which ``cairn fidelity`` can probe). Plus ``cairn``, the installed command run
in a process of its own, and ``cairn_cost``, the rows ``cairn cost`` prints."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from cairn import Cairn, Context
from cairn.agent import LLMSummarizer, user
from cairn.agent.simulate import SimulatedModelServer
from cairn.clock import FakeClock
from tests.agent_server import DocReader, model_server, openai_client, reader_task

READER = "reader/1"


COST_BATCH = "digest"


def cost_run(path: Path) -> Cairn:
    """A real run that compacts: a batch of two note-taking agents on the local
    model server (which reports part of each prompt as read from its cache),
    each compaction summarized by a model on a server of its own; then the
    reading agent ``READER``, outside the batch."""
    app = Cairn(f"sqlite:///{path}", clock=FakeClock())
    with (
        SimulatedModelServer(
            lambda request: {"role": "assistant", "content": "Noted."}, cached_tokens=300
        ) as agent,
        SimulatedModelServer(_summary) as summ,
    ):
        summarizer = LLMSummarizer(openai_client(summ), model="gpt-4o-mini")

        @app.task(name="notes")
        def notes(ctx: Context, seed: int) -> int:
            conv = ctx.conversation(
                "main",
                system="You take notes.",
                threshold=2000,
                keep_tail=600,
                summarizer=summarizer,
                summary_tokens=300,
                client=openai_client(agent),
            )
            for turn in range(30):
                words = " ".join(f"w{seed}{turn}{i}" for i in range(40 + (turn * seed) % 30))
                conv.append(user(f"turn {turn}: {words}"))
                ctx.llm(conv, model="gpt-4o")
            return conv.stats.compactions

        report = app.run_batch(COST_BATCH, notes, [{"seed": 1}, {"seed": 2}], progress=False)
        assert report.completed == 2
        assert summ.requests > 0  # it compacted, through the summarizer's server
    with model_server(DocReader(docs=8)) as reader_model:
        task = reader_task(app, openai_client(reader_model), threshold=600, keep_tail=200)
        app.run(task, task_id=READER, goal="Read doc-00 to doc-07.")
    return app


def _summary(request: dict[str, Any]) -> dict[str, Any]:
    """The summarizer's model: a short summary."""
    return {"role": "assistant", "content": "Goal: take notes.\n" + "- noted. " * 30}


def cairn(*args: str, env: dict[str, str] | None = None) -> str:
    """What the installed ``cairn`` command prints, run in a process of its own."""
    return cairn_process(*args, env=env).stdout


def cairn_process(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The installed ``cairn`` command run in a process of its own, to its end
    (an error if it fails): what it printed on stdout and on stderr."""
    cairn = Path(sys.executable).with_name("cairn")
    return subprocess.run(
        [str(cairn), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "400", **(env or {})},
        timeout=120,
        check=True,
    )


def cairn_cost(url: str, *args: str) -> dict[str, list[str]]:
    """The rows ``cairn cost`` prints (the installed command, in a process of its
    own), by label: each row's cells as printed."""
    printed = cairn("cost", "--store", url, *args)
    rows = [line.split() for line in printed.splitlines()[1:] if line.strip()]
    return {row[0]: row for row in rows}
