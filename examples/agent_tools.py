"""A tool-using agent with a long, durable conversation (scenario 3, in small).

The agent researches a shelf of documents: it lists them, reads them one tool
call at a time, and writes a report. Every message is checkpointed as it is
appended, every model call is recorded, and the conversation is compacted into
a running summary whenever it grows past ``--threshold`` tokens. Kill it at any
moment (Ctrl-C, SIGKILL) and run the same command again: it resumes with the
same context, and no model call that had returned is sent again.

Offline by default: the model is a simulated OpenAI-compatible server started
in this process (reached through the openai SDK if it is installed, else
answering in process). With ``OPENAI_API_KEY`` (and optionally ``OPENAI_BASE_URL``,
for vLLM, Ollama, a llama.cpp server...) or ``ANTHROPIC_API_KEY`` set, it talks
to that provider instead (``pip install 'cairn-durable[openai]'`` or
``'cairn-durable[anthropic]'``)::

    python examples/agent_tools.py --docs 30 --store sqlite:////tmp/agent.db
    cairn conversation research/shelf --store /tmp/agent.db --all
    cairn cost --store /tmp/agent.db
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Mapping
from typing import Any

from cairn import Cairn, Context
from cairn.agent import ExtractiveSummarizer, tool_result, user
from cairn.agent.costs import cost_report
from cairn.agent.messages import text_of
from cairn.agent.simulate import SimulatedModelServer, SimulatedProvider

SYSTEM = (
    "You are a careful research agent. Use the tools to list the documents, read "
    "each one, and then call finish with a short report of what they say."
)
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": list(properties),
            },
        },
    }
    for name, description, properties in (
        ("list_documents", "List the documents on the shelf.", {}),
        ("read_document", "Read one document.", {"name": {"type": "string"}}),
        ("finish", "Finish with the report.", {"report": {"type": "string"}}),
    )
]
MAX_TURNS = 200


# -- the tools: a deterministic shelf of documents ------------------------------------------
def shelf(docs: int) -> list[str]:
    return [f"doc-{i:02d}" for i in range(docs)]


def read_document(name: str) -> str:
    """The text of a document (about 500 characters)."""
    number = int(name.split("-")[1])
    facts = " ".join(
        f"Fact {j}: region {number % 5} sold {number * 13 + j * 7} units in week {j + 1}."
        for j in range(7)
    )
    return f"{name} says: {facts}"


def run_tool(name: str, arguments: Mapping[str, Any], docs: int) -> str:
    if name == "list_documents":
        return "documents: " + ", ".join(shelf(docs))
    if name == "read_document":
        return read_document(str(arguments.get("name", "doc-00")))
    return f"unknown tool {name!r}"


# -- the simulated model -------------------------------------------------------------------
class SimulatedResearcher:
    """Decides like a diligent model would, from the context alone: list, read the
    next unread document (the highest one the context shows read, plus one), finish.
    With ``docs`` None it learns how many there are from the user's request."""

    def __init__(self, docs: int | None) -> None:
        self.docs = docs

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        text = " ".join(text_of(m) for m in request["messages"])
        read = [int(n) for n in re.findall(r"doc-(\d\d) says", text)]
        if not read and "documents:" not in text:
            return _call("list_documents", {}, "call_list")
        asked = re.search(r"(\d+) documents\.", text)
        docs = self.docs if self.docs is not None else int(asked.group(1) if asked else 0)
        following = max(read, default=-1) + 1
        if following < docs:
            name = f"doc-{following:02d}"
            return _call("read_document", {"name": name}, f"call_{name}")
        report = f"Read {docs} documents; sales by region are in the summary."
        return _call("finish", {"report": report}, "call_finish")


def _call(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": f"Next: {name}.",
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


# -- the agent -----------------------------------------------------------------------------
# No store argument: the store comes from $CAIRN_STORE, else ./.cairn/cairn.db.
app = Cairn()

CRASH_CHECK = {
    "task": "research",
    "kwargs": {"topic": "crash", "docs": 3, "threshold": 500, "keep_tail": 150},
}

# The model client: main() sets it; otherwise one is built on first use.
_model: tuple[Any, str] | None = None


def model() -> tuple[Any, str]:
    """The client and model name: a real provider if the environment names one,
    else the simulated researcher, answering in this process."""
    global _model  # one client per process, built on first use
    if _model is None:
        _model = real_client() or (SimulatedProvider(SimulatedResearcher(None)), "gpt-4o-mini")
    return _model


@app.task(name="research")
def research(
    ctx: Context, topic: str, docs: int, threshold: int = 3000, keep_tail: int = 1000
) -> str:
    """Research ``docs`` documents with a tool-using model; return its report."""
    client, model_name = model()
    conv = ctx.conversation(
        "main",
        system=SYSTEM,
        threshold=threshold,
        keep_tail=keep_tail,
        summarizer=ExtractiveSummarizer(max_tokens=400),
        client=client,
    )
    conv.append(user(f"Research the {topic} shelf: {docs} documents."))
    for _ in range(MAX_TURNS):
        reply = ctx.llm(conv, model=model_name, tools=TOOLS)
        if not reply.tool_calls:
            return reply.content or ""
        for call in reply.tool_calls:
            if call.name == "finish":
                return str(call.args.get("report", ""))
            result = ctx.step(f"tool {call.name}", run_tool, call.name, call.args, docs)
            conv.append(tool_result(call.id, result))
    return "gave up after too many turns"


def real_client() -> tuple[Any, str] | None:
    """A client and model for a real provider, if the environment names one."""
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
        import openai

        name = os.environ.get("CAIRN_EXAMPLE_MODEL", "gpt-4o-mini")
        return openai.OpenAI(api_key=os.environ.get("OPENAI_API_KEY") or "not-needed"), name
    if os.environ.get("ANTHROPIC_API_KEY"):
        import anthropic

        name = os.environ.get("CAIRN_EXAMPLE_MODEL", "claude-3-5-haiku-latest")
        return anthropic.Anthropic(), name
    return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=None, help="store URL (default: $CAIRN_STORE)")
    parser.add_argument("--docs", type=int, default=20)
    parser.add_argument("--topic", default="shelf")
    parser.add_argument("--threshold", type=int, default=3000)
    parser.add_argument("--keep-tail", type=int, default=1000)
    return parser.parse_args(argv)


def run(options: argparse.Namespace) -> dict[str, Any]:
    if options.store:
        app.use_store(options.store)
    with app:
        report = app.run(
            research,
            task_id=f"research/{options.topic}",
            topic=options.topic,
            docs=options.docs,
            threshold=options.threshold,
            keep_tail=options.keep_tail,
        )
        costs = cost_report(app.store).total.to_json()
    return {"report": report, "cost": costs}


def main(argv: list[str] | None = None) -> int:
    global _model  # main picks the client for this process
    options = parse_args(argv)
    real = real_client()
    if real is not None:
        _model = real
        outcome = run(options)
    else:
        try:
            import openai
        except ImportError:
            # Offline without the openai SDK: the same simulated model, in this process.
            _model = SimulatedProvider(SimulatedResearcher(options.docs)), "gpt-4o-mini"
            outcome = run(options)
        else:
            # Offline: a simulated OpenAI-compatible server, reached over HTTP like a real one.
            with SimulatedModelServer(SimulatedResearcher(options.docs)) as server:
                client = openai.OpenAI(base_url=server.base_url, api_key="simulated")
                _model = client, "gpt-4o-mini"
                outcome = run(options)
    sys.stdout.write(json.dumps(outcome, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
