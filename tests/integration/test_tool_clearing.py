"""Tool-result clearing: old tool results leave the active context as short
placeholders, the originals stay in the archive, and the cleared context is the
same after a crash and on replay. Token counts are the local model server's own
(``tests/agent_server.py``), reached through the openai SDK."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from cairn import Cairn, Context, TaskDef
from cairn.agent import ToolResultClearing, iter_history, load_conversation, tool_result, user
from cairn.agent.messages import text_of
from cairn.agent.simulate import SimulatedModelServer
from cairn.agent.tokens import count_messages
from cairn.clock import FakeClock
from cairn.testing import set_fault_hook
from tests.agent_server import Crash, crash_at, model_server, openai_client, resume

PAGES = 14
BIG = 17_000  # tokens of the first page, about 4 characters a token
FETCH_TOOL = {
    "type": "function",
    "function": {
        "name": "fetch",
        "description": "Fetch page n.",
        "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}},
    },
}


def page(n: int) -> str:
    """Page 0 is ~17,000 tokens; the others ~200."""
    return ("page 0 line. " * (BIG * 4 // 13)) if n == 0 else f"page {n}: " + "a fact. " * 100


def fetcher_model(request: Mapping[str, Any]) -> dict[str, Any]:
    """Fetches pages 0, 1, ... one a turn (the next is the count of tool results
    in the context, cleared ones included), then answers."""
    n = sum(1 for m in request["messages"] if m["role"] == "tool")
    if n >= PAGES:
        return {"role": "assistant", "content": f"Fetched {PAGES} pages."}
    function = {"name": "fetch", "arguments": json.dumps({"n": n})}
    call = {"id": f"c{n}", "type": "function", "function": function}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def fetcher(
    app: Cairn,
    client: Any,
    clearing: ToolResultClearing | None,
    seen: list[list[dict[str, Any]]] | None = None,
    restored: list[list[dict[str, Any]]] | None = None,
) -> TaskDef[..., int]:
    @app.task(name="fetcher")
    def run(ctx: Context) -> int:
        conv = ctx.conversation(
            "main",
            system="Fetch the pages.",
            threshold=60_000,
            keep_tail=2000,
            client=client,
            clear_tool_results=clearing,
        )
        if restored is not None:
            restored.append(conv.restored)
        conv.append(user("Fetch every page."))
        while True:
            if seen is not None and not conv.replaying:
                seen.append(conv.messages)
            reply = ctx.llm(conv, model="gpt-4o-mini", tools=[FETCH_TOOL])
            if not reply.tool_calls:
                return conv.stats.cleared_results
            for call in reply.tool_calls:
                text = ctx.step(f"fetch {call.args['n']}", page, int(call.args["n"]))
                conv.append(tool_result(call.id, text))

    return run


def _prompts(server: SimulatedModelServer) -> list[int]:
    """The prompt tokens of each request, as the server counts them."""
    return [count_messages(body["messages"]) for body in server.bodies]


@pytest.mark.parametrize(
    ("clearing", "carrying"),
    [
        (None, 14),
        (ToolResultClearing(keep=3), 3),
        (ToolResultClearing(keep=3, exclude=frozenset({"fetch"})), 14),
    ],
)
def test_a_huge_tool_result_leaves_the_context_after_keep_newer_ones(
    app: Cairn, clearing: ToolResultClearing | None, carrying: int
) -> None:
    """A 17,000-token tool result and 14 calls after it: without clearing (or with
    its tool excluded) every one of the 14 requests carries it (over 17,000 tokens
    each at the server); with keep=3 only the next 3 do, and the rest are small."""
    with model_server(fetcher_model) as server:
        cleared = app.run(fetcher(app, openai_client(server), clearing), task_id="f")
        prompts = _prompts(server)
    assert len(prompts) == PAGES + 1
    after = prompts[1:]
    assert sum(1 for tokens in after if tokens > BIG) == carrying
    if carrying == 3:
        assert max(after[3:]) < 5000
        assert cleared == PAGES - 3  # every result but the last 3
    # The archive keeps every original.
    rows = [r for r in iter_history(app.store, "f", "main") if r.message["role"] == "tool"]
    assert len(rows) == PAGES
    assert rows[0].message["content"] == page(0)


def test_the_cleared_context_is_the_same_after_a_crash_and_on_replay(
    app: Cairn, db_path: Path, clock: FakeClock, tmp_path: Path
) -> None:
    """Killed after its 8th call, the agent resumes with exactly the cleared
    context it had (restored = what call 8 sent, plus its reply), sends no
    request twice, and from then on sends what an uncrashed run sends; outside
    the task the stored conversation shows the same cleared context."""
    policy = ToolResultClearing(keep=3)
    with model_server(fetcher_model) as clean_server:
        clean = Cairn(f"sqlite:///{tmp_path / 'clean.db'}", clock=FakeClock())
        clean.run(fetcher(clean, openai_client(clean_server), policy), task_id="f")
        clean.close()
        expected = clean_server.bodies
    with model_server(fetcher_model) as server:
        set_fault_hook(app, crash_at("after_llm", 8))
        with pytest.raises(Crash):
            app.run(fetcher(app, openai_client(server), policy), task_id="f")
        sent_before_crash = server.bodies[-1]["messages"]
        other = resume(f"sqlite:///{db_path}", clock)
        restored: list[list[dict[str, Any]]] = []
        try:
            task = fetcher(other, openai_client(server), policy, restored=restored)
            other.run(task, task_id="f")
            view = load_conversation(other.store, "f", "main")
        finally:
            other.close()
        assert server.repeats == 0
        assert server.bodies == expected
    assert restored[0][:-1] == sent_before_crash
    assert "cleared from the context" in text_of(restored[0][3])  # page 0's result
    assert view is not None
    assert view.messages == [
        *expected[-1]["messages"],
        {"role": "assistant", "content": f"Fetched {PAGES} pages."},
    ]


def test_what_was_cleared_stays_cleared_when_the_policy_changes(
    app: Cairn, db_path: Path, clock: FakeClock
) -> None:
    """The decisions are read from the record, not made again: resumed after a
    crash with a policy that would keep 10 results, the restored context and the
    replayed one still have the results the first run cleared."""
    with model_server(fetcher_model) as server:
        set_fault_hook(app, crash_at("after_llm", 8))
        with pytest.raises(Crash):
            app.run(fetcher(app, openai_client(server), ToolResultClearing(keep=3)), task_id="f")
        sent_before_crash = server.bodies[-1]["messages"]
        other = resume(f"sqlite:///{db_path}", clock)
        restored: list[list[dict[str, Any]]] = []
        seen: list[list[dict[str, Any]]] = []
        try:
            task = fetcher(
                other, openai_client(server), ToolResultClearing(keep=10), seen, restored
            )
            other.run(task, task_id="f")
        finally:
            other.close()
        first_resumed = server.bodies[8]["messages"]
    assert restored[0][:-1] == sent_before_crash
    # The first live call after the resume still sends the cleared results as cleared.
    assert first_resumed[: len(sent_before_crash)] == sent_before_crash
    assert seen[0][: len(sent_before_crash)] == sent_before_crash
