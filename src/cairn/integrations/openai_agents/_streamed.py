"""A streamed model call of the Agents SDK (``Runner.run_streamed``) as a recorded entry.

``RecordedModel.stream_response`` makes the same ``llm`` entry as
``get_response``: the first run streams the request, hands each event to the
SDK as it arrives (text deltas reach ``stream_events()`` live), and records
the completed response; a replay sends nothing. The ``response.completed``
event, from which the SDK takes the response and goes on to run tools, is
held back until the entry is committed, and is rebuilt from the record in both
runs, so the SDK acts only on a recorded response and sees the same one live
and replayed. A replayed call streams no deltas: its text is in the completed
response. A stream cut short records nothing: the call is made again from
the start, and its events are streamed again. The stream is asked for its
usage (``include_usage``, which the SDK sends by default only to
api.openai.com), so its entry carries the tokens ``cairn cost`` counts;
``ModelSettings(include_usage=False)`` keeps it off for a server that refuses it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from agents import ModelResponse, ModelSettings, Usage
from agents.items import TResponseStreamEvent
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseTextDeltaEvent,
    ResponseUsage,
)

from cairn.agent.provider_errors import behind_framework
from cairn.engine.run import adrive
from cairn.engine.steps import step_machine
from cairn.errors import CairnError

if TYPE_CHECKING:
    from cairn.integrations.openai_agents._state import RunState

Encode = Callable[[ModelResponse], dict[str, Any]]
Decode = Callable[[dict[str, Any]], ModelResponse]


async def recorded_stream(
    stream: Callable[[], AsyncIterator[TResponseStreamEvent]],
    state: RunState,
    name: str,
    encode: Encode,
    decode: Decode,
) -> AsyncIterator[TResponseStreamEvent]:
    """The events of one streamed model call, recorded (see the module doc)."""
    live: asyncio.Queue[TResponseStreamEvent] = asyncio.Queue()
    sent = [0]
    run, entry = state.run, f"agents-sdk model {name}"

    async def send() -> dict[str, Any]:
        completed: Response | None = None
        try:
            async for event in stream():
                sent[0] += 1
                if isinstance(event, ResponseCompletedEvent):
                    completed = event.response
                    continue
                live.put_nowait(event)
                if isinstance(event, ResponseTextDeltaEvent):
                    # To watchers as it arrives (cairn.observe.lane); never stored.
                    run.observe("call_chunk", run.seq, "llm", entry, value=event.delta)
        except Exception as exc:
            mapped = behind_framework(exc, provider="openai-agents")
            if mapped is None:
                raise
            raise mapped from None
        if completed is None:
            raise RuntimeError("the model's stream ended before its response.completed event")
        return encode(_model_response(completed))

    machine = step_machine(run, "llm", entry, send, (), {}, state.retry)
    recording = asyncio.ensure_future(adrive(machine, run.clock))
    async for event in _until_done(live, recording):
        yield event
    try:
        recorded = recording.result()
    except CairnError as exc:
        state.failure = exc  # raised by run() as it is, whatever the SDK makes of it
        raise
    response = decode(recorded)
    state.model_returned(response)
    yield ResponseCompletedEvent(
        type="response.completed",
        response=completed_response(response, name),
        sequence_number=sent[0],
    )


async def _until_done(
    live: asyncio.Queue[TResponseStreamEvent], recording: asyncio.Future[Any]
) -> AsyncIterator[TResponseStreamEvent]:
    """The events put on ``live`` until ``recording`` is done, then the rest."""
    try:
        while not recording.done():
            getting = asyncio.ensure_future(live.get())
            await asyncio.wait({getting, recording}, return_when=asyncio.FIRST_COMPLETED)
            if getting.done():
                yield getting.result()
            else:
                getting.cancel()
        while not live.empty():
            yield live.get_nowait()
    finally:
        if not recording.done():  # the SDK stopped reading: stop the call too
            recording.cancel()


def with_usage(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call's arguments with the stream asked for its usage (the SDK asks
    only api.openai.com for it by default, and a stream without usage would
    record no tokens for ``cairn cost``), unless ``include_usage`` is set."""
    if "model_settings" in kwargs:
        kwargs = {**kwargs, "model_settings": _usage_on(kwargs["model_settings"])}
    elif len(args) > 2:
        args = (*args[:2], _usage_on(args[2]), *args[3:])
    return args, kwargs


def _usage_on(settings: Any) -> Any:
    if isinstance(settings, ModelSettings) and settings.include_usage is None:
        return dataclasses.replace(settings, include_usage=True)
    return settings


def _model_response(response: Response) -> ModelResponse:
    usage = response.usage
    sdk_usage = (
        Usage(requests=1)
        if usage is None
        else Usage(
            requests=1,
            input_tokens=usage.input_tokens,
            input_tokens_details=usage.input_tokens_details,
            output_tokens=usage.output_tokens,
            output_tokens_details=usage.output_tokens_details,
            total_tokens=usage.total_tokens,
        )
    )
    request_id = getattr(response, "_request_id", None)
    return ModelResponse(
        output=list(response.output),
        usage=sdk_usage,
        response_id=response.id,
        request_id=request_id,
    )


def completed_response(response: ModelResponse, name: str) -> Response:
    """The ``Response`` of a ``response.completed`` event for a recorded response."""
    usage = response.usage
    return Response(
        id=response.response_id or "__cairn_recorded__",
        created_at=0,
        model=name,
        object="response",
        output=list(response.output),
        parallel_tool_calls=False,
        tool_choice="auto",
        tools=[],
        usage=ResponseUsage(
            input_tokens=usage.input_tokens,
            input_tokens_details=usage.input_tokens_details,
            output_tokens=usage.output_tokens,
            output_tokens_details=usage.output_tokens_details,
            total_tokens=usage.total_tokens,
        ),
    )
