"""A fake OpenAI-compatible (and Anthropic-shaped) model server for the agent tests.

The server itself is ``cairn.agent.simulate.SimulatedModelServer`` (cairn ships
it so users can test their agents offline too): ``/v1/chat/completions`` with
tool calls and usage, ``/v1/messages`` in Anthropic's shape, counting every
request and every repeat of an identical one, scriptable through ``respond``.
It runs in a thread of the test process, so its counts survive a SIGKILLed
client subprocess.

This module adds the models the tests script:

- ``DocReader``: a tool-using agent's model. It reads documents ``doc-00``,
  ``doc-01``, ... one tool call per turn and then answers. It decides from the
  conversation alone (the highest ``doc-NN`` a tool result mentions, summary
  included), so identical context gives an identical request, and a request
  that is sent twice shows up in ``server.repeats``.
- ``Scripted``: answers from a fixed list, in order.
- ``RuleReader``: reads documents like ``DocReader``, but with the tool a rule
  said once at the start names (``RULE``): while the rule is in its context it
  calls ``archive_fetch``, without it ``read_document``, so a summary that drops
  the rule really changes its decisions (the fidelity tests). At temperature 0
  it is deterministic; at any other it calls the other tool with probability
  ``noise`` (seeded), as a sampled model varies.

And what the in-process crash tests share: ``Crash`` (a stand-in for the process
dying), ``crash_at`` (a fault hook raising it), ``resume`` (the app of the
process that restarts), and ``reader_task``, a tool-using agent on a conversation.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import anthropic
import openai

from cairn import Cairn, Context, TaskDef
from cairn.agent import EstimateCounter, ExtractiveSummarizer, tool_result, user
from cairn.agent.messages import text_of
from cairn.agent.simulate import SimulatedModelServer
from cairn.clock import FakeClock

API_KEY = "sk-test-SECRET-do-not-store-4242"
_READ = re.compile(r"doc-(\d\d) says")


def doc_text(number: int) -> str:
    """The (deterministic) text of document ``number``: about 400 characters."""
    body = " ".join(
        f"fact {number}.{i} is that item {number * 7 + i} costs {i * 3} euros." for i in range(9)
    )
    return f"doc-{number:02d} says: {body}"


class DocReader:
    """The model of a document-reading agent (see the module doc)."""

    def __init__(self, docs: int) -> None:
        self.docs = docs

    def next_doc(self, messages: Sequence[Mapping[str, Any]]) -> int:
        seen = [int(n) for m in messages for n in _READ.findall(text_of(m))]
        return max(seen, default=-1) + 1

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        number = self.next_doc(request["messages"])
        if number >= self.docs:
            return {"role": "assistant", "content": f"Read all {self.docs} documents. Done."}
        arguments = json.dumps({"name": f"doc-{number:02d}"})
        return {
            "role": "assistant",
            "content": f"I will read doc-{number:02d} next.",
            "tool_calls": [
                {
                    "id": f"call_{number:02d}",
                    "type": "function",
                    "function": {"name": "read_document", "arguments": arguments},
                }
            ],
        }


class Scripted:
    """Answers with ``replies`` in order (text, or a full assistant message)."""

    def __init__(self, replies: Sequence[str | Mapping[str, Any]]) -> None:
        self._replies = list(replies)
        self.calls = 0

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        reply = self._replies[min(self.calls, len(self._replies) - 1)]
        self.calls += 1
        if isinstance(reply, str):
            return {"role": "assistant", "content": reply}
        return dict(reply)


RULE = "Fetch documents with archive_fetch."
FETCH = "archive_fetch"
READ = "read_document"


class RuleReader(DocReader):
    """The model of a reader whose tool depends on a rule (see the module doc)."""

    def __init__(self, docs: int, *, noise: float = 0.0, seed: int = 0) -> None:
        super().__init__(docs)
        self.noise = noise
        self._rng = random.Random(seed)

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        messages = request["messages"]
        number = self.next_doc(messages)
        if number >= self.docs:
            return {"role": "assistant", "content": f"Read all {self.docs} documents. Done."}
        ruled = any(RULE in text_of(m) for m in messages)
        tool = FETCH if ruled else READ
        if request.get("temperature", 1.0) != 0 and self._rng.random() < self.noise:
            tool = READ if tool == FETCH else FETCH
        offered = [t["function"]["name"] for t in request.get("tools") or []]
        if tool not in offered:
            return {"role": "assistant", "content": f"I have no {tool} tool."}
        arguments = json.dumps({"name": f"doc-{number:02d}"})
        function = {"name": tool, "arguments": arguments}
        call = {"id": f"call_{number:02d}", "type": "function", "function": function}
        return {"role": "assistant", "content": None, "tool_calls": [call]}


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


FETCH_TOOL = {
    "type": "function",
    "function": {
        "name": FETCH,
        "description": "Fetch one document from the archive by name.",
        "parameters": {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        },
    },
}


@contextmanager
def model_server(respond: Any) -> Iterator[SimulatedModelServer]:
    """A started server with ``respond`` as its model."""
    with SimulatedModelServer(respond) as server:
        yield server


def openai_client(server: SimulatedModelServer, *, is_async: bool = False) -> Any:
    """An openai SDK client on ``server`` (no SDK retries: tests count requests)."""
    cls = openai.AsyncOpenAI if is_async else openai.OpenAI
    return cls(base_url=server.base_url, api_key=API_KEY, max_retries=0)


def anthropic_client(server: SimulatedModelServer) -> anthropic.Anthropic:
    """An anthropic SDK client on ``server``."""
    return anthropic.Anthropic(base_url=server.anthropic_base_url, api_key=API_KEY, max_retries=0)


# -- in-process crashes and the reading agent -------------------------------------------
LEASE = 10.0
# Past any lease the crashed app held (the default lease is 30 s).
STALE = 3600.0
ELSEWHERE = "elsewhere-00000000/4242/1/cafef00d"
SYSTEM = "You read documents and report what they say."
Hook = Callable[[str, str, int, str], None]


class Crash(BaseException):
    """Stands for the process dying: cairn lets a BaseException through untouched."""


def crash_at(point: str, nth: int) -> Hook:
    """A fault hook that 'kills' the run at the ``nth`` time ``point`` is reached."""
    seen = [0]

    def hook(at: str, task_id: str, seq: int, name: str) -> None:
        if at == point:
            seen[0] += 1
            if seen[0] == nth:
                raise Crash(f"crash at {point} #{nth} ({name})")

    return hook


def resume(url: str, clock: FakeClock) -> Cairn:
    """A new app standing for the process that restarts after the crash: an owner
    on another host, which may take the task once its lease has expired."""
    clock.advance(STALE)
    other = Cairn(url, clock=clock, lease=LEASE)
    other.owner = ELSEWHERE
    return other


def reader_task(
    app: Cairn,
    client: Any,
    *,
    threshold: int = 1200,
    keep_tail: int = 400,
    summarizer: Any = None,
    max_context: int | None = None,
    seen: list[list[dict[str, Any]]] | None = None,
    restored: list[list[dict[str, Any]]] | None = None,
) -> TaskDef[..., str]:
    """A tool-using agent: asks the model, runs its read_document calls as steps,
    appends the results, until the model answers in text. ``seen`` collects the
    context before each live call; ``restored`` what the conversation opened with;
    ``max_context`` is the conversation's hard bound (None: its default)."""

    @app.task(name="reader")
    def reader(ctx: Context, goal: str) -> str:
        conv = ctx.conversation(
            "main",
            system=SYSTEM,
            threshold=threshold,
            keep_tail=keep_tail,
            summarizer=summarizer or ExtractiveSummarizer(max_tokens=250),
            client=client,
            max_context=max_context,
            # The fake server counts with the estimate, and so does the conversation
            # (named no counter, it would count gpt-4o-mini's real tokens).
            counter=EstimateCounter(),
        )
        if restored is not None:
            restored.append(conv.restored)
        conv.append(user(goal))
        while True:
            if seen is not None and not conv.replaying:
                seen.append(conv.messages)
            reply = ctx.llm(conv, model="gpt-4o-mini", tools=[READ_TOOL])
            if not reply.tool_calls:
                return str(reply.content)
            for call in reply.tool_calls:
                number = int(call.args["name"].split("-")[1])
                text = ctx.step(f"read {call.args['name']}", doc_text, number)
                conv.append(tool_result(call.id, text))

    return reader
