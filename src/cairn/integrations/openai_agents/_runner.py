"""``run()``: an Agents SDK ``Runner.run`` inside a cairn task, every model call
and tool call a recorded entry.

The agents are cloned with their models wrapped in ``RecordedModel`` (and the
run's model provider wrapped too, for agents that name their model by a
string) and their function tools wrapped as steps (``_tools``). Killed mid-run
and run again, the task replays: the recorded responses come back without a
request, the recorded tool outputs without a call, and the run goes on live
from where the record ends. The first entry records the agent definition's
fingerprint (``_fingerprint``), so a resume with another definition stops with
a clear error instead of replaying into the wrong agent.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from agents import (
    Agent,
    FunctionTool,
    Handoff,
    Model,
    RunConfig,
    Runner,
    RunResult,
    RunResultStreaming,
)
from agents import RunState as SDKRunState

from cairn.agent.pricing import DEFAULT_PRICES, PriceTable
from cairn.context import Context
from cairn.engine.run import in_event_loop
from cairn.integrations._definition import check_definition
from cairn.integrations.openai_agents._approvals import check_approvals, settled
from cairn.integrations.openai_agents._compacting import compacting_filter
from cairn.integrations.openai_agents._fingerprint import changes, fingerprint
from cairn.integrations.openai_agents._model import RecordedModel, RecordedProvider, model_name
from cairn.integrations.openai_agents._session import CairnSession
from cairn.integrations.openai_agents._state import RunState
from cairn.integrations.openai_agents._tools import recorded_tool
from cairn.retry import Retry


async def run(
    ctx: Context,
    agent: Agent[Any],
    input: str | list[Any],  # noqa: A002 - the name Runner.run gives it
    *,
    run_config: RunConfig | None = None,
    prices: PriceTable | None = None,
    retry: Retry | None = None,
    parallel_tools: bool = False,
    approvals: str = "return",
    approval_timeout: float | None = None,
    compact_in_run: bool = False,
    **kwargs: Any,
) -> RunResult:
    """``Runner.run(agent, input, ...)`` as a durable part of the task ``ctx`` runs.

    Every other keyword (``session``, ``context``, ``max_turns``, ``hooks``...)
    goes to ``Runner.run`` as it is. ``prices`` prices the recorded calls for
    ``cairn cost``; ``retry`` is the model calls' step retry policy (default:
    the app's step policy). The function tools of one response run one after
    the other, unless ``parallel_tools`` (then side by side; a crash may run
    again every one in flight); either way each is recorded at the position
    its place in the response gives it. ``approvals="wait"`` makes each tool
    approval the run stops at a durable ``ctx.wait_for`` and goes on once it
    is decided (``_approvals``; ``"return"``: the interruptions come back in
    the result, as the SDK returns them). ``compact_in_run``: with a
    ``CairnSession``, each model call sends the session's compacted context,
    so its threshold bounds every request of a long run (``_compacting``). Raises
    ``AgentDefinitionChanged`` if the task started this run with another agent
    definition."""
    if not isinstance(ctx, Context):
        raise TypeError(
            f"run() takes the task's ctx first, not {ctx!r}: call it inside a cairn task"
        )
    check_approvals(approvals)
    # One clone for the whole run: a run resumed after an approval goes on with it.
    clone, config, state = _prepared(ctx, agent, run_config, prices, retry, parallel_tools)
    config = _compacting(config, kwargs.get("session"), compact_in_run)
    start: str | list[Any] | SDKRunState[Any] = input
    while True:
        try:
            result = await Runner.run(clone, start, run_config=config, **kwargs)
        except Exception as exc:
            if state.failure is not None and state.failure is not exc:
                raise state.failure from exc  # cairn's own error, not the SDK's wrapping of it
            raise
        pending = None if approvals == "return" else settled(ctx, result, approval_timeout)
        if pending is None:
            return result
        start = pending


def run_streamed(
    ctx: Context,
    agent: Agent[Any],
    input: str | list[Any],  # noqa: A002 - the name Runner.run_streamed gives it
    *,
    run_config: RunConfig | None = None,
    prices: PriceTable | None = None,
    retry: Retry | None = None,
    parallel_tools: bool = False,
    compact_in_run: bool = False,
    **kwargs: Any,
) -> RunResultStreaming:
    """``Runner.run_streamed(agent, input, ...)`` as a durable part of the task:
    ``run()``'s recording, with the model's events streamed as they arrive
    (``_streamed``). Consume ``result.stream_events()`` inside the task, to
    its end. Options as ``run()``'s (tool approvals come back in the result)."""
    if not isinstance(ctx, Context):
        raise TypeError(
            f"run_streamed() takes the task's ctx first, not {ctx!r}: call it inside a cairn task"
        )
    clone, config, _ = _prepared(ctx, agent, run_config, prices, retry, parallel_tools)
    config = _compacting(config, kwargs.get("session"), compact_in_run)
    return Runner.run_streamed(clone, input, run_config=config, **kwargs)


def _compacting(config: RunConfig, session: Any, asked: bool) -> RunConfig:
    """``config`` sending a ``CairnSession``'s compacted context to each model
    call of the run (``_compacting``), if ``asked``; else as it is."""
    if not asked or not isinstance(session, CairnSession):
        return config
    own = config.call_model_input_filter
    return dataclasses.replace(config, call_model_input_filter=compacting_filter(session, own))


def _prepared(
    ctx: Context,
    agent: Agent[Any],
    run_config: RunConfig | None,
    prices: PriceTable | None,
    retry: Retry | None,
    parallel_tools: bool,
) -> tuple[Agent[Any], RunConfig, RunState]:
    """The definition checked; the recorded clone of ``agent``, the run config
    with its models recorded, and the run's shared state."""
    config = run_config or RunConfig()
    _check_definition(ctx, agent, config)
    state = RunState(
        ctx, retry or ctx._default_step_retry, prices or DEFAULT_PRICES, parallel_tools
    )
    provider = RecordedProvider(config.model_provider, state)
    model = config.model
    if isinstance(model, Model):
        model = RecordedModel(model, state)
    config = dataclasses.replace(config, model_provider=provider, model=model)
    return recorded_agent(agent, state), config, state


def run_sync(
    ctx: Context,
    agent: Agent[Any],
    input: str | list[Any],  # noqa: A002 - the name Runner.run gives it
    **kwargs: Any,
) -> RunResult:
    """``run()`` for a plain ``def`` task: on an event loop of its own, as
    ``Runner.run_sync`` does. In an ``async def`` task, ``await run(...)``."""
    if in_event_loop():
        raise RuntimeError(
            "run_sync() was called inside an event loop (an async task): use await run(...)"
        )
    return asyncio.run(run(ctx, agent, input, **kwargs))


def _check_definition(ctx: Context, agent: Agent[Any], config: RunConfig) -> None:
    """Record the definition's fingerprint (a recorded input, written as it is:
    there is no function to call), or compare it with the recorded one. A
    model the run config forces on every agent is part of the definition."""
    current = fingerprint(agent)
    if config.model is not None:
        current["(run config)"] = {"model": model_name(config.model)}
    check_definition(ctx, f"agents-sdk agent {agent.name}", current, changes, "Agents SDK")


def recorded_agent(agent: Agent[Any], state: RunState) -> Agent[Any]:
    """A clone of ``agent`` (and of the agents it hands off to) whose model and
    function tools are recorded."""
    clones: dict[int, Agent[Any]] = {}
    return _clone(agent, state, clones)


def _clone(agent: Agent[Any], state: RunState, clones: dict[int, Agent[Any]]) -> Agent[Any]:
    if id(agent) in clones:
        return clones[id(agent)]
    changed: dict[str, Any] = {}
    if isinstance(agent.model, Model) and not isinstance(agent.model, RecordedModel):
        changed["model"] = RecordedModel(agent.model, state)
    changed["tools"] = [
        recorded_tool(tool, state) if isinstance(tool, FunctionTool) else tool
        for tool in agent.tools
    ]
    clone = agent.clone(**changed)
    clones[id(agent)] = clone  # before the handoffs: agents may hand back to each other
    clone.handoffs = [_handoff(h, state, clones) for h in agent.handoffs]
    return clone


def _handoff(
    handoff: Agent[Any] | Handoff[Any, Any], state: RunState, clones: dict[int, Agent[Any]]
) -> Agent[Any] | Handoff[Any, Any]:
    if isinstance(handoff, Agent):
        return _clone(handoff, state, clones)
    invoke = handoff.on_invoke_handoff

    async def on_invoke_handoff(*args: Any, **kwargs: Any) -> Agent[Any]:
        return _clone(await invoke(*args, **kwargs), state, clones)

    return dataclasses.replace(handoff, on_invoke_handoff=on_invoke_handoff)
