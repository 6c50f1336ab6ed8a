"""Function tools of an Agents SDK run as recorded cairn entries.

Every ``FunctionTool`` of the agents a run reaches is wrapped: its call is a
step (``tool NAME``), so a replay returns the recorded output and does not call
the tool again. A step is at least once: a crash after the tool returned and
before its output was recorded calls it again on resume. A tool marked with
``once_tool`` runs through ``ctx.once`` instead: its key is claimed and
committed before the tool runs, so a crash in that window leaves the key *in
doubt* (settled by the ``reconcile`` function you give, or ``on_doubt``), and
the tool is never silently called twice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from agents import FunctionTool
from agents.tool_context import ToolContext

from cairn.engine.once import OnDoubt, Reconcile
from cairn.errors import CairnError
from cairn.integrations.openai_agents._state import RunState


@dataclass(frozen=True, slots=True)
class OncePolicy:
    """How a ``once_tool``'s in-doubt call is settled (see ``Context.once``)."""

    reconcile: Reconcile | None
    on_doubt: OnDoubt


_KEY: ContextVar[str | None] = ContextVar("cairn_agents_sdk_operation_key", default=None)


def operation_key() -> str | None:
    """Inside a ``once_tool``'s call: its operation key, to pass on as the outside
    system's idempotency key (or to look for in ``reconcile``). None elsewhere."""
    return _KEY.get()


# Kept on the tool itself: FunctionTool is a dataclass compared by value, so unhashable.
_ONCE = "_cairn_once_policy"


def once_tool(
    tool: FunctionTool, *, reconcile: Reconcile | None = None, on_doubt: OnDoubt = "raise"
) -> FunctionTool:
    """Mark ``tool`` as a side effect: inside ``run()`` each of its calls goes
    through ``ctx.once`` with the key ``agents-sdk/TASK/TURN/CALL_ID``.
    ``reconcile(key)`` is asked about a call a crash left in doubt (return its
    output if it happened, None to call again); without one, ``on_doubt``
    decides (``"raise"``: the task stops with ``InDoubtOperation``). Returns
    ``tool`` itself."""
    if not isinstance(tool, FunctionTool):
        raise TypeError(f"once_tool takes a FunctionTool (from @function_tool), not {tool!r}")
    setattr(tool, _ONCE, OncePolicy(reconcile, on_doubt))
    return tool


def recorded_tool(tool: FunctionTool, state: RunState) -> FunctionTool:
    """``tool`` with its calls recorded in the task's history."""
    invoke = tool.on_invoke_tool
    policy: OncePolicy | None = getattr(tool, _ONCE, None)

    async def on_invoke_tool(tool_ctx: ToolContext[Any], tool_input: str) -> Any:
        call_id = str(tool_ctx.tool_call_id)
        turnstile = state.turnstile
        await turnstile.wait_for(call_id)

        async def call(*key: str) -> Any:
            if state.parallel_tools:
                turnstile.started(call_id)  # our position is taken: the next may start
            token = _KEY.set(key[0] if key else None)
            try:
                return await invoke(tool_ctx, tool_input)
            finally:
                _KEY.reset(token)

        try:
            return await _recorded_call(state, tool.name, call_id, call, policy)
        except CairnError as exc:
            state.failure = exc  # the SDK wraps what a tool raises; run() raises this
            raise
        finally:
            turnstile.started(call_id)  # done, replayed, or failed before the call

    return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)


def _recorded_call(
    state: RunState,
    name: str,
    call_id: str,
    call: Callable[..., Awaitable[Any]],
    policy: OncePolicy | None,
) -> Awaitable[Any]:
    ctx = state.ctx
    if policy is None:
        result: Awaitable[Any] = ctx.step(f"tool {name}", call)
        return result
    key = f"agents-sdk/{ctx.task_id}/{state.turn}/{call_id}"
    done: Awaitable[Any] = ctx.once(
        key, call, scope="agents-sdk", reconcile=policy.reconcile, on_doubt=policy.on_doubt
    )
    return done
