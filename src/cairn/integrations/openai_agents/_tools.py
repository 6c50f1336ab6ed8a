"""Function tools of an Agents SDK run as recorded cairn entries.

Every ``FunctionTool`` of the agents a run reaches is wrapped: its call is a
step (``tool NAME``) at the position reserved for its call id (``_state``), so
a replay returns the recorded output and does not call the tool again. A step
is at least once: a crash after the tool returned and before its output was
recorded calls it again on resume. A tool marked with ``once_tool`` runs
through ``ctx.once``'s machine instead: its key is claimed and committed before
the tool runs, so a crash in that window leaves the key *in doubt* (settled by
the ``reconcile`` function you give, or ``on_doubt``), and the tool is never
silently called twice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from agents import FunctionTool
from agents.tool_context import ToolContext

from cairn.engine.once import OncePolicy, OnDoubt, Reconcile, once_machine
from cairn.engine.run import adrive
from cairn.engine.steps import step_machine
from cairn.errors import CairnError
from cairn.integrations.openai_agents._state import RunState
from cairn.keys import bounded_key
from cairn.retry import NO_RETRY

SCOPE = "agents-sdk"
_KEY: ContextVar[str | None] = ContextVar("cairn_agents_sdk_operation_key", default=None)


def operation_key() -> str | None:
    """Inside a ``once_tool``'s call: its operation key, to pass on as the outside
    system's idempotency key (or to look for in ``reconcile``). None elsewhere."""
    return _KEY.get()


@dataclass(frozen=True, slots=True)
class OnceTool:
    """How a ``once_tool``'s in-doubt call is settled (see ``Context.once``)."""

    reconcile: Reconcile | None
    on_doubt: OnDoubt


# Kept on the tool itself: FunctionTool is a dataclass compared by value, so unhashable.
_ONCE = "_cairn_once_policy"


def once_tool(
    tool: FunctionTool, *, reconcile: Reconcile | None = None, on_doubt: OnDoubt = "raise"
) -> FunctionTool:
    """Mark ``tool`` as a side effect: inside ``run()`` each of its calls goes
    through ``ctx.once`` with the key ``agents-sdk/TASK/TURN/CALL_ID`` (scope
    ``agents-sdk``). ``reconcile(key)`` is asked about a call a crash left in
    doubt (return its output if it happened, None to call again); without one,
    ``on_doubt`` decides (``"raise"``: the task stops with ``InDoubtOperation``).
    Returns ``tool`` itself."""
    if not isinstance(tool, FunctionTool):
        raise TypeError(f"once_tool takes a FunctionTool (from @function_tool), not {tool!r}")
    setattr(tool, _ONCE, OnceTool(reconcile, on_doubt))
    return tool


def recorded_tool(tool: FunctionTool, state: RunState) -> FunctionTool:
    """``tool`` with its calls recorded in the task's history."""
    invoke = tool.on_invoke_tool
    policy: OnceTool | None = getattr(tool, _ONCE, None)

    async def on_invoke_tool(tool_ctx: ToolContext[Any], tool_input: str) -> Any:
        call_id = str(tool_ctx.tool_call_id)
        seq = state.position_of(call_id)

        async def call(*key: str) -> Any:
            token = _KEY.set(key[0] if key else None)
            try:
                return await invoke(tool_ctx, tool_input)
            finally:
                _KEY.reset(token)

        try:
            if state.parallel_tools:
                return await _recorded(state, tool.name, call_id, seq, call, policy)
            async with state.one_at_a_time:
                return await _recorded(state, tool.name, call_id, seq, call, policy)
        except CairnError as exc:
            state.failure = exc  # the SDK wraps what a tool raises; run() raises this
            raise

    return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)


async def _recorded(
    state: RunState,
    name: str,
    call_id: str,
    seq: int | None,
    call: Callable[..., Awaitable[Any]],
    policy: OnceTool | None,
) -> Any:
    ctx = state.ctx
    run = ctx._run
    if policy is None:
        retry = ctx._default_step_retry
        steps = step_machine(run, "step", f"tool {name}", call, (), {}, retry, None, seq)
        return await adrive(steps, run.clock)
    key = bounded_key(f"{SCOPE}/{ctx.task_id}/{state.turn}/{call_id}")
    once = OncePolicy(
        retry=NO_RETRY, scope=SCOPE, reconcile=policy.reconcile, on_doubt=policy.on_doubt
    )
    return await adrive(once_machine(run, key, call, (), {}, once, seq), run.clock)
