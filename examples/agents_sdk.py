"""A research agent in the OpenAI Agents SDK, made durable by cairn.

The agent reads a shelf of documents with two tools (``list_documents``,
``read_document``: each call a recorded step) and files its report with a
third (``file_report``: a side effect, through ``ctx.once``). It runs with
``Runner.run`` as written for the SDK; ``cairn.integrations.openai_agents.run``
records every model response and tool output in the task's history, and the
agent's session is a ``CairnSession``: a cairn conversation, compacted as it
grows. Kill it at any moment and run the same command again: no model request
that had returned is sent again, no tool call that was recorded runs again,
and the report is filed once.

Offline by default: the model is a simulated OpenAI-compatible server started
in this process (``cairn.agent.simulate``), reached over HTTP through the SDK's
``OpenAIChatCompletionsModel``. With ``OPENAI_BASE_URL`` (vLLM, Ollama, a
llama.cpp server...) or ``OPENAI_API_KEY`` set, it talks to that endpoint::

    pip install 'cairn-durable[openai-agents]'
    python examples/agents_sdk.py --docs 12 --store sqlite:////tmp/agents.db
    cairn conversation agents-sdk/shelf --store /tmp/agents.db --all
    cairn cost --store /tmp/agents.db

``CRASH_CHECK`` below is how cairn's own tests crash-test every example.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from agents import Agent, OpenAIChatCompletionsModel, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

from cairn import Cairn, Context
from cairn.agent import ExtractiveSummarizer
from cairn.agent.costs import cost_report
from cairn.agent.messages import text_of
from cairn.agent.simulate import SimulatedModelServer
from cairn.integrations.openai_agents import CairnSession, once_tool, operation_key, run

INSTRUCTIONS = (
    "You are a careful research agent. List the documents, read every one of "
    "them (two at a time), file a short report with file_report, then say what "
    "you filed."
)
# The reports filed: the outside system the side effect changes.
LEDGER = Path(os.environ.get("CAIRN_EXAMPLE_LEDGER", "agents_sdk_reports.jsonl"))
MAX_TURNS = 60

app = Cairn()  # the store: $CAIRN_STORE, else ./.cairn/cairn.db

CRASH_CHECK = {
    "task": "research",
    "kwargs": {"topic": "crash", "docs": 2, "threshold": 400, "keep_tail": 150},
    "effects": "ledger_entries",
    # Imported once by the process the runs fork from, not once a run (~1.5 s each).
    "preload": ["agents", "openai", "cairn.integrations.openai_agents"],
}


# -- the tools -------------------------------------------------------------------------
def read_text(name: str) -> str:
    """The text of a document (about 400 characters)."""
    number = int(name.split("-")[1])
    facts = " ".join(
        f"Fact {j}: region {number % 4} sold {number * 11 + j * 5} units in week {j + 1}."
        for j in range(6)
    )
    return f"{name} says: {facts}"


@function_tool
def list_documents(docs: int) -> str:
    """List the documents on a shelf of ``docs`` documents."""
    return "documents: " + ", ".join(f"doc-{i:02d}" for i in range(docs))


@function_tool
def read_document(name: str) -> str:
    """Read one document by name."""
    return read_text(name)


def filed(key: str) -> str | None:
    """Whether the report of operation ``key`` is in the ledger (the reconcile
    function: asked if a crash left the filing in doubt)."""
    for line in LEDGER.read_text().splitlines() if LEDGER.exists() else ():
        entry = json.loads(line)
        if entry["key"] == key:
            return f"filed report {entry['number']}"
    return None


def _file_report(report: str) -> str:
    """File the final report."""
    entries = LEDGER.read_text().splitlines() if LEDGER.exists() else []
    entry = {"key": operation_key(), "report": report, "number": len(entries)}
    with LEDGER.open("a") as ledger:
        ledger.write(json.dumps(entry) + "\n")  # one write: a kill leaves no half line
    return f"filed report {len(entries)}"


file_report = once_tool(function_tool(_file_report, name_override="file_report"), reconcile=filed)


def ledger_entries() -> dict[str, int]:
    """Reports per operation key in the ledger (the crash check's effects)."""
    if not LEDGER.exists():
        return {}
    counts: dict[str, int] = {}
    for line in LEDGER.read_text().splitlines():
        key = json.loads(line)["key"]
        counts[key] = counts.get(key, 0) + 1
    return counts


# -- the simulated model -------------------------------------------------------------------
def simulated_researcher(request: dict[str, Any]) -> dict[str, Any]:
    """Decides like a diligent model would, from the context alone (chat shape):
    list, read the next two unread documents, file the report, answer."""
    text = " ".join(text_of(m) for m in request["messages"])
    if "filed report" in text:
        return {"role": "assistant", "content": "Filed the report."}
    if "documents:" not in text:
        asked = re.search(r"(\d+) documents", text)
        return _calls(("list_documents", {"docs": int(asked.group(1) if asked else 0)}))
    listed = re.search(r"documents: ((?:doc-\d\d(?:, )?)*)", text)
    docs = len(re.findall(r"doc-\d\d", listed.group(1))) if listed else 0
    read = {int(n) for n in re.findall(r"doc-(\d\d) says", text)}
    unread = [n for n in range(docs) if n not in read][:2]
    if unread:
        return _calls(*(("read_document", {"name": f"doc-{n:02d}"}) for n in unread))
    report = f"Read {docs} documents; sales by region are in the summary."
    return _calls(("file_report", {"report": report}))


def _calls(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{name}_{hashlib.sha256(json.dumps(args).encode()).hexdigest()[:8]}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for name, args in calls
        ],
    }


# -- the agent -----------------------------------------------------------------------------
_server: SimulatedModelServer | None = None


def model() -> OpenAIChatCompletionsModel:
    """The model: the endpoint the environment names, else a simulated server
    started in this process on first use."""
    global _server  # one server per process
    base_url = os.environ.get("OPENAI_BASE_URL")
    if base_url is None and not os.environ.get("OPENAI_API_KEY"):
        set_tracing_disabled(True)  # offline: no trace export
        if _server is None:
            _server = SimulatedModelServer(simulated_researcher).start()
        base_url = _server.base_url
    client = AsyncOpenAI(base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY") or "none")
    name = os.environ.get("CAIRN_EXAMPLE_MODEL", "gpt-4o-mini")
    return OpenAIChatCompletionsModel(model=name, openai_client=client)


def researcher() -> Agent[Any]:
    return Agent(
        name="researcher",
        instructions=INSTRUCTIONS,
        model=model(),
        tools=[list_documents, read_document, file_report],
    )


@app.task(name="agents-sdk-research")
async def research(
    ctx: Context, topic: str, docs: int, threshold: int = 3000, keep_tail: int = 1000
) -> str:
    """Research ``docs`` documents with the Agents SDK; return the agent's answer."""
    session = CairnSession(
        "main",
        ctx=ctx,
        threshold=threshold,
        keep_tail=keep_tail,
        summarizer=ExtractiveSummarizer(max_tokens=300),
    )
    goal = f"Research the {topic} shelf: {docs} documents."
    result = await run(ctx, researcher(), goal, session=session, max_turns=MAX_TURNS)
    return str(result.final_output)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=None, help="store URL (default: $CAIRN_STORE)")
    parser.add_argument("--docs", type=int, default=12)
    parser.add_argument("--topic", default="shelf")
    parser.add_argument("--threshold", type=int, default=3000)
    parser.add_argument("--keep-tail", type=int, default=1000)
    options = parser.parse_args(argv)
    if options.store:
        app.use_store(options.store)
    with app:
        answer = app.run(
            research,
            task_id=f"agents-sdk/{options.topic}",
            topic=options.topic,
            docs=options.docs,
            threshold=options.threshold,
            keep_tail=options.keep_tail,
        )
        costs = cost_report(app.store).total.to_json()
    sys.stdout.write(json.dumps({"answer": answer, "cost": costs}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
