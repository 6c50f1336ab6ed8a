"""A LangGraph agent checkpointed in a cairn store
(``pip install 'cairn-durable[langgraph,openai]'``).

A two-node graph: ``model`` asks an OpenAI-compatible chat model what to do,
``tools`` runs the document reader it asks for, and back, until the model
answers in text. The graph is compiled with ``CairnSaver``, and every step is
checkpointed before the next starts (``durability="sync"``). Kill it at any
moment (Ctrl-C, SIGKILL) and run the same command again: it resumes from the
last checkpoint; a step that had finished is not run again, so no model
request that had returned to a finished step is sent twice.

Offline by default: the model is a simulated OpenAI-compatible server started
in this process. With ``OPENAI_API_KEY`` (and optionally ``OPENAI_BASE_URL``,
for vLLM, Ollama, a llama.cpp server...) set, it talks to that server instead::

    python examples/langgraph_agent.py --docs 8 --store sqlite:////tmp/lg.db
    python examples/langgraph_agent.py --store postgresql://postgres@127.0.0.1/postgres
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    HumanMessage,
    ToolMessage,
    convert_to_openai_messages,
)
from langgraph.graph import END, START, MessagesState, StateGraph

from cairn.agent.simulate import SimulatedModelServer
from cairn.integrations.langgraph import CairnSaver

THREAD = "research/shelf"
READ_TOOL = {
    "type": "function",
    "function": {
        "name": "read_document",
        "description": "Read one document by name.",
        "parameters": {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        },
    },
}
Hook = Callable[[str], None]  # called with "model", "model returned" or "tool"


# cairn's crash harness kills a cairn task at each of its boundaries; this graph
# is not a cairn task (LangGraph runs it, cairn only keeps its checkpoints), so
# it is crash-tested by its own SIGKILL test instead, named here.
CRASH_CHECK = {
    "crash_tested_by": "tests/acceptance/test_langgraph_sigkill.py",
    "why": "a LangGraph graph, not a cairn task: its boundaries are LangGraph's checkpoints",
}


def read_document(name: str) -> str:
    """The (deterministic) text of a document, about 400 characters."""
    number = int(name.split("-")[1])
    facts = " ".join(f"item {number * 7 + j} costs {j * 3} euros." for j in range(9))
    return f"{name} says: {facts}"


class SimulatedReader:
    """The simulated model: reads doc-00, doc-01, ... one tool call a turn, then
    answers. It decides from the request alone, so the same context gives the
    same request (the server counts a repeat as a request sent twice)."""

    def __init__(self, docs: int) -> None:
        self.docs = docs

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        read = [int(n) for n in re.findall(r"doc-(\d\d) says", json.dumps(request["messages"]))]
        following = max(read, default=-1) + 1
        if following >= self.docs:
            return {"role": "assistant", "content": f"Read {self.docs} documents."}
        name = f"doc-{following:02d}"
        arguments = json.dumps({"name": name})
        return {
            "role": "assistant",
            "content": f"Reading {name}.",
            "tool_calls": [
                {
                    "id": f"call_{name}",
                    "type": "function",
                    "function": {"name": "read_document", "arguments": arguments},
                }
            ],
        }


def build(
    saver: CairnSaver,
    client: Any,
    model: str,
    *,
    calls_file: Path | None = None,
    hook: Hook | None = None,
) -> Any:
    """The agent graph on ``saver``. ``calls_file`` gets a line per tool run (the
    tool's effect, counted outside cairn); ``hook`` sees each node start."""
    noted = hook or (lambda point: None)

    def call_model(state: MessagesState) -> dict[str, list[AnyMessage]]:
        noted("model")
        reply = client.chat.completions.create(
            model=model,
            messages=convert_to_openai_messages(state["messages"]),
            tools=[READ_TOOL],
        )
        noted("model returned")
        message = reply.choices[0].message
        calls = [
            {"name": c.function.name, "args": json.loads(c.function.arguments), "id": c.id}
            for c in message.tool_calls or []
        ]
        return {"messages": [AIMessage(message.content or "", tool_calls=calls)]}

    def run_tools(state: MessagesState) -> dict[str, list[AnyMessage]]:
        noted("tool")
        last = state["messages"][-1]
        assert isinstance(last, AIMessage)
        results: list[AnyMessage] = []
        for call in last.tool_calls:
            if calls_file is not None:
                with calls_file.open("a") as out:
                    out.write(f"{call['args']['name']}\n")
            results.append(
                ToolMessage(read_document(call["args"]["name"]), tool_call_id=call["id"])
            )
        return {"messages": results}

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    builder = StateGraph(MessagesState)
    builder.add_node("model", call_model)
    builder.add_node("tools", run_tools)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", route, ["tools", END])
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=saver)


def research(graph: Any, docs: int) -> str:
    """Run the thread to its answer: start it, or resume it where it stopped."""
    config = {"configurable": {"thread_id": THREAD}, "recursion_limit": 4 * docs + 10}
    state = graph.get_state(config)
    if not state.values:
        question = HumanMessage(f"Read the {docs} documents of the shelf.")
        result = graph.invoke({"messages": [question]}, config, durability="sync")
    elif state.next or state.tasks:
        # Not done while a step has tasks: ``next`` leaves out the tasks whose
        # writes are stored, so a kill after a step's last task finished and
        # before its checkpoint was written shows ``next == ()`` and a task with
        # writes. ``invoke(None)`` applies those writes (it runs nothing again)
        # and goes on.
        result = graph.invoke(None, config, durability="sync")
    else:
        result = state.values
    return str(result["messages"][-1].content)


def main(argv: list[str] | None = None, *, hook: Hook | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=os.environ.get("CAIRN_STORE", "sqlite:///lg.db"))
    parser.add_argument("--docs", type=int, default=8)
    parser.add_argument("--calls-file", type=Path, default=None, help="a line per tool run")
    options = parser.parse_args(argv)
    try:
        import openai
    except ImportError:
        # The model node talks to a chat model through the openai SDK, even offline.
        sys.stderr.write("this example needs pip install 'cairn-durable[langgraph,openai]'\n")
        return 2

    with CairnSaver(options.store) as saver:
        if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
            client = openai.OpenAI(api_key=os.environ.get("OPENAI_API_KEY") or "not-needed")
            model = os.environ.get("CAIRN_EXAMPLE_MODEL", "gpt-4o-mini")
            graph = build(saver, client, model, calls_file=options.calls_file, hook=hook)
            answer = research(graph, options.docs)
        else:
            # Offline: a simulated OpenAI-compatible server, reached over HTTP like a real one.
            with SimulatedModelServer(SimulatedReader(options.docs)) as server:
                client = openai.OpenAI(base_url=server.base_url, api_key="simulated")
                graph = build(
                    saver, client, "gpt-4o-mini", calls_file=options.calls_file, hook=hook
                )
                answer = research(graph, options.docs)
    sys.stdout.write(answer + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
