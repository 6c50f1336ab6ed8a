"""Compaction inside one ``Runner.run``: each model call sends the session's
compacted context, not the run's whole input.

Within one run the SDK sends the session's items as they were when the run
started plus everything the run has added since, however many turns it takes;
it saves each turn to the session before the next model call, and the
``CairnSession`` compacts past its threshold as it saves, but the SDK's own
input list keeps growing. ``run()`` and ``run_streamed()`` given
``compact_in_run=True`` therefore put a ``RunConfig.call_model_input_filter``
in front of every model call of a run with a ``CairnSession``: when the
session holds a summary and its items after the summary are the end of the
run's input, the input sent is the summary and those items. Otherwise (no
compaction yet, a session the run's input does not end with) the input goes
as it is. A filter of the caller's own runs after,
on what this one gives.

It is asked for, not the default: an agent that tracks its progress only in
its context (which documents it has read) loses it when the head is folded
into a summary that does not keep it, and then repeats its work; the
simulated researcher of ``examples/agents_sdk.py`` does, with the extractive
summarizer, until its turns run out.

The compactions are the session's own, recorded in the task's history as any
conversation's (or its session task's), so a run resumed after a SIGKILL
reads the same session at the same point of each turn and sends (or replays)
the same input.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import TYPE_CHECKING, Any

from agents.run_config import CallModelData, CallModelInputFilter, ModelInputData

if TYPE_CHECKING:
    from cairn.integrations.openai_agents._session import CairnSession


def compacting_filter(
    session: CairnSession, own: CallModelInputFilter | None
) -> CallModelInputFilter:
    """The input filter that sends ``session``'s compacted context (see the
    module doc), then the caller's filter ``own``, if any."""

    async def compacted(data: CallModelData[Any]) -> ModelInputData:
        context = await session.compacted_context()
        model_data = data.model_data
        if context is not None:
            model_data = _shortened(model_data, *context)
        if own is None:
            return model_data
        result = own(dataclasses.replace(data, model_data=model_data))
        return await result if inspect.isawaitable(result) else result

    return compacted


def _shortened(data: ModelInputData, summary: Any, tail: list[Any]) -> ModelInputData:
    """``data`` with what comes before ``tail`` replaced by ``summary``, if the
    input ends with ``tail`` and is longer than it; else ``data`` as it is."""
    run_input = list(data.input)
    ends = bool(tail) and run_input[len(run_input) - len(tail) :] == tail
    if len(run_input) <= len(tail) or not ends:
        return data
    return ModelInputData(input=[summary, *tail], instructions=data.instructions)
