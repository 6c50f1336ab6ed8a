"""A research agent in Pydantic AI, made durable by cairn.

The agent reads a shelf of documents with two tools (``list_documents``,
``read_document``: each call a recorded step), has a second agent write the
summary (``summarize``: it delegates with ``usage=ctx.usage``, so the
delegate's tokens are the run's), and files its report with a fourth tool
(``file_report``: a side effect, through ``ctx.once``). The agent is written
for Pydantic AI as usual; ``CairnDurability`` among its capabilities records
every model response and tool result in the cairn task that runs it. Kill it at
any moment and run the same command again: no model request that had returned
is sent again, no tool call that was recorded runs again, the report is filed
once, and the run's usage is the usage of a run that was never killed.

Offline by default: the model is a simulated OpenAI-compatible server started
in this process (``cairn.agent.simulate``), reached over HTTP through Pydantic
AI's ``OpenAIChatModel``. With ``OPENAI_BASE_URL`` (vLLM, Ollama, a llama.cpp
server...) or ``OPENAI_API_KEY`` set, it talks to that endpoint::

    pip install 'cairn-durable[pydantic-ai]'
    python examples/pydantic_ai_agent.py --docs 12 --store sqlite:////tmp/pydantic.db
    cairn show pydantic-ai/shelf --store /tmp/pydantic.db
    cairn cost --store /tmp/pydantic.db

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

from pydantic import TypeAdapter
from pydantic_ai import Agent, RunContext
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.usage import RunUsage

from cairn import Cairn, Context
from cairn.agent.costs import cost_report
from cairn.agent.messages import text_of
from cairn.agent.simulate import SimulatedModelServer
from cairn.integrations.pydantic_ai import CairnDurability, operation_key

INSTRUCTIONS = (
    "You are a careful research agent. List the documents, read every one of "
    "them (two at a time), have the summary written with summarize, file it "
    "with file_report, then say what you filed."
)
SUMMARIZER = "You write one-line summaries of research notes."
# The reports filed: the outside system the side effect changes.
LEDGER = Path(os.environ.get("CAIRN_EXAMPLE_LEDGER", "pydantic_ai_reports.jsonl"))
USAGE: TypeAdapter[RunUsage] = TypeAdapter(RunUsage)

app = Cairn()  # the store: $CAIRN_STORE, else ./.cairn/cairn.db

CRASH_CHECK = {
    "task": "research",
    "kwargs": {"topic": "crash", "docs": 2},
    "effects": "ledger_entries",
    # Imported once by the process the runs fork from, not once a run (~2 s each).
    "preload": ["pydantic_ai", "pydantic_ai.models.openai", "cairn.integrations.pydantic_ai"],
}


# -- the tools' outside world ------------------------------------------------------------
def read_text(name: str) -> str:
    """The text of a document (about 400 characters)."""
    number = int(name.split("-")[1])
    facts = " ".join(
        f"Fact {j}: region {number % 4} sold {number * 11 + j * 5} units in week {j + 1}."
        for j in range(6)
    )
    return f"{name} says: {facts}"


def filed(key: str) -> str | None:
    """Whether the report of operation ``key`` is in the ledger (the reconcile
    function: asked if a crash left the filing in doubt)."""
    for line in LEDGER.read_text().splitlines() if LEDGER.exists() else ():
        entry = json.loads(line)
        if entry["key"] == key:
            return f"filed report {entry['number']}"
    return None


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
    list, read the next two unread documents, summarize, file, answer. Asked as
    the summarizer, it writes the summary."""
    text = " ".join(text_of(m) for m in request["messages"])
    if SUMMARIZER in text:
        docs = len(set(re.findall(r"doc-\d\d", text)))
        return {"role": "assistant", "content": f"Summary ({docs} documents): sales by region."}
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
    summary = re.search(r"Summary \(\d+ documents\): sales by region\.", text)
    if summary is None:
        return _calls(("summarize", {"docs": docs}))
    return _calls(("file_report", {"report": f"Read {docs} documents. {summary.group(0)}"}))


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


# -- the agents ----------------------------------------------------------------------------
_server: SimulatedModelServer | None = None


def model() -> OpenAIChatModel:
    """The model: the endpoint the environment names, else a simulated server
    started in this process on first use."""
    global _server  # one server per process
    base_url = os.environ.get("OPENAI_BASE_URL")
    if base_url is None and not os.environ.get("OPENAI_API_KEY"):
        if _server is None:
            _server = SimulatedModelServer(simulated_researcher).start()
        base_url = _server.base_url
    provider = OpenAIProvider(base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY") or "none")
    return OpenAIChatModel(os.environ.get("CAIRN_EXAMPLE_MODEL", "gpt-4o-mini"), provider=provider)


def researcher() -> Agent[None, str]:
    """The lead agent, durable through CairnDurability; the summarizer it
    delegates to runs inside the ``summarize`` tool's recorded step."""
    summarizer = Agent(model(), name="summarizer", instructions=SUMMARIZER)
    agent = Agent(
        model(), name="researcher", instructions=INSTRUCTIONS, capabilities=[CairnDurability()]
    )

    @agent.tool_plain
    def list_documents(docs: int) -> str:
        """List the documents on a shelf of ``docs`` documents."""
        return "documents: " + ", ".join(f"doc-{i:02d}" for i in range(docs))

    @agent.tool_plain
    def read_document(name: str) -> str:
        """Read one document by name."""
        return read_text(name)

    @agent.tool
    async def summarize(ctx: RunContext[None], docs: int) -> str:
        """Have the summary of the ``docs`` documents read so far written."""
        names = ", ".join(f"doc-{n:02d}" for n in range(docs))
        result = await summarizer.run(f"Summarize the notes on {names}.", usage=ctx.usage)
        return result.output

    @agent.tool_plain(metadata={"cairn": {"once": True, "reconcile": filed}})
    def file_report(report: str) -> str:
        """File the final report."""
        entries = LEDGER.read_text().splitlines() if LEDGER.exists() else []
        entry = {"key": operation_key(), "report": report, "number": len(entries)}
        with LEDGER.open("a") as ledger:
            ledger.write(json.dumps(entry) + "\n")  # one write: a kill leaves no half line
        return f"filed report {len(entries)}"

    return agent


@app.task(name="pydantic-ai-research")
async def research(ctx: Context, topic: str, docs: int) -> dict[str, Any]:
    """Research ``docs`` documents with Pydantic AI; the answer and the run's usage."""
    result = await researcher().run(f"Research the {topic} shelf: {docs} documents.")
    usage = USAGE.dump_python(result.usage, mode="json", exclude={"cost"})
    return {"answer": result.output, "usage": usage}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=None, help="store URL (default: $CAIRN_STORE)")
    parser.add_argument("--docs", type=int, default=12)
    parser.add_argument("--topic", default="shelf")
    options = parser.parse_args(argv)
    if options.store:
        app.use_store(options.store)
    with app:
        result = app.run(
            research, task_id=f"pydantic-ai/{options.topic}", topic=options.topic, docs=options.docs
        )
        costs = cost_report(app.store).total.to_json()
    sys.stdout.write(json.dumps({**result, "cost": costs}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
