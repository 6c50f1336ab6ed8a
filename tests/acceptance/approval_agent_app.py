"""An Agents SDK support agent whose refund tool needs a person's approval.

Task ``support(order)``: ``run(ctx, agent, ..., approvals="wait")``. The model
(``support_model``, for the simulated server) looks the order up, then asks in
one response for ``refund`` (``needs_approval``) and ``notify`` (no approval),
then answers. Each tool call appends ``TOOL ORDER PID`` to the file named by
``CAIRN_TEST_COUNTS`` (one line per time a tool really ran), counted outside
the store.

``python -m tests.acceptance.approval_agent_app URL BASE_URL TASK_ID ORDER
POINT NTH MARKER`` runs the task once with ``app.run`` and prints the answer,
exits with code 3 when the task is left waiting for an approval, and SIGKILLs
itself the NTH time it reaches fault point POINT (``-``: never; once across
runs, the MARKER file says it did).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from agents import Agent, function_tool

from cairn import Cairn, Context, TaskWaiting
from cairn.agent.messages import text_of
from cairn.integrations.openai_agents import run
from cairn.testing import set_fault_hook
from tests.agent_server import API_KEY
from tests.agents_sdk import MODEL
from tests.crashes import sigkill_at

app = Cairn()
WAITING_EXIT = 3
REFUSED = "Not refunded: the refund was rejected."


def count(tool: str, order: str) -> None:
    """Append one count line (O_APPEND: whole lines even from many processes)."""
    fd = os.open(os.environ["CAIRN_TEST_COUNTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{tool} {order} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


@function_tool
def lookup(order: str) -> str:
    """Look an order up."""
    count("lookup", order)
    return f"order {order}: paid 40 euros, damaged on arrival"


@function_tool(needs_approval=True)
def refund(order: str) -> str:
    """Refund an order (a person approves each refund)."""
    count("refund", order)
    return f"refunded {order}: 40 euros"


@function_tool
def notify(order: str) -> str:
    """Tell the customer their case is being handled."""
    count("notify", order)
    return f"customer of {order} notified"


def _call(call_id: str, name: str, order: str) -> dict[str, Any]:
    function = {"name": name, "arguments": json.dumps({"order": order})}
    return {"id": call_id, "type": "function", "function": function}


def support_model(request: dict[str, Any]) -> dict[str, Any]:
    """The support agent's model (deterministic: the same context, the same answer)."""
    text = " ".join(text_of(m) for m in request["messages"])
    order = "o-1"
    if f"refunded {order}" in text:
        return {"role": "assistant", "content": f"Refunded {order}."}
    if "customer of" in text:
        return {"role": "assistant", "content": REFUSED}
    if "paid 40 euros" in text:
        calls = [_call("call_refund", "refund", order), _call("call_notify", "notify", order)]
        return {"role": "assistant", "content": None, "tool_calls": calls}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [_call("call_lookup", "lookup", order)],
    }


def support_agent(base_url: str) -> Agent[Any]:
    from agents import OpenAIChatCompletionsModel
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base_url, api_key=API_KEY, max_retries=0)
    model = OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
    return Agent(
        name="support", instructions="Handle refunds.", model=model, tools=[lookup, refund, notify]
    )


BASE_URL: list[str] = []


@app.task
async def support(ctx: Context, order: str) -> str:
    """Handle a damaged order: look it up, refund it once a person approves."""
    agent = support_agent(BASE_URL[0])
    result = await run(ctx, agent, f"Order {order} arrived damaged.", approvals="wait")
    return str(result.final_output)


def main(argv: list[str]) -> int:
    url, base_url, task_id, order, point, nth, marker = argv
    BASE_URL.append(base_url)
    app.use_store(url)
    set_fault_hook(app, sigkill_at(point, int(nth), marker))
    try:
        print(app.run(support, task_id=task_id, order=order))
    except TaskWaiting as waiting:
        print(waiting)
        return WAITING_EXIT
    finally:
        app.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
