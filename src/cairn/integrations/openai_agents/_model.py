"""The Agents SDK's model calls as recorded cairn entries (kind ``llm``).

``RecordedModel`` wraps the model an agent would use: each ``get_response`` is
one history entry of the task. The first run sends the request and records the
response (its output items, usage and estimated cost); a replay returns the
recorded response and sends nothing. Both runs hand the SDK a response decoded
from the record, so they see the same objects and save the same items. A
streamed call (``stream_response``, ``Runner.run_streamed``) is the same entry
(``_streamed``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from agents import Model, ModelProvider, ModelResponse, Usage
from agents.items import TResponseOutputItem, TResponseStreamEvent
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails
from pydantic import TypeAdapter

from cairn.agent.metering import framework_meter
from cairn.agent.pricing import Usage as CairnUsage
from cairn.agent.provider_errors import behind_framework
from cairn.engine.run import adrive
from cairn.engine.steps import step_machine
from cairn.errors import CairnError
from cairn.integrations.openai_agents._streamed import recorded_stream, with_usage
from cairn.redaction import register_from

if TYPE_CHECKING:
    from cairn.engine.meter import Meter
    from cairn.engine.run import TaskRun
    from cairn.integrations.openai_agents._state import RunState

_OUTPUT_ITEM: TypeAdapter[TResponseOutputItem] = TypeAdapter(TResponseOutputItem)


def model_name(model: Model | str | None) -> str:
    """The name a model goes by in the record and the price table."""
    if model is None or isinstance(model, str):
        return model or "default"
    name = getattr(model, "model", None)
    return name if isinstance(name, str) else type(model).__name__


def encode_response(response: ModelResponse, name: str, state: RunState) -> dict[str, Any]:
    """What the ``llm`` entry records: cairn's usage and cost fields (read by
    ``cairn cost``), and the response in a form ``decode_response`` rebuilds."""
    usage = response.usage
    cached = usage.input_tokens_details.cached_tokens or 0
    cairn_usage = CairnUsage(usage.input_tokens, usage.output_tokens, cached)
    return {
        "provider": "openai-agents",
        "model": name,
        "usage": cairn_usage.to_dict(),
        "cost": state.prices.cost(name, cairn_usage),
        "finish_reason": None,
        "output": [item.model_dump(mode="json", exclude_unset=True) for item in response.output],
        "sdk_usage": {
            "requests": usage.requests,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "total_tokens": usage.total_tokens,
            "input_tokens_details": usage.input_tokens_details.model_dump(mode="json"),
            "output_tokens_details": usage.output_tokens_details.model_dump(mode="json"),
        },
        "response_id": response.response_id,
        "request_id": response.request_id,
    }


def decode_response(recorded: dict[str, Any]) -> ModelResponse:
    """The ``ModelResponse`` a recorded entry stands for."""
    sdk = recorded["sdk_usage"]
    usage = Usage(
        requests=int(sdk["requests"]),
        input_tokens=int(sdk["input_tokens"]),
        input_tokens_details=InputTokensDetails.model_validate(sdk["input_tokens_details"]),
        output_tokens=int(sdk["output_tokens"]),
        output_tokens_details=OutputTokensDetails.model_validate(sdk["output_tokens_details"]),
        total_tokens=int(sdk["total_tokens"]),
    )
    output = [_OUTPUT_ITEM.validate_python(item) for item in recorded["output"]]
    return ModelResponse(
        output=output,
        usage=usage,
        response_id=recorded.get("response_id"),
        request_id=recorded.get("request_id"),
    )


class RecordedModel(Model):
    """A model whose every ``get_response`` is a recorded entry of the task."""

    def __init__(self, inner: Model, state: RunState) -> None:
        register_from(inner)  # its client's key: never stored (cairn.redaction)
        self.inner = inner
        self.model = model_name(inner)
        self._state = state

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        state = self._state
        name = self.model

        async def send() -> dict[str, Any]:
            try:
                response = await self.inner.get_response(*args, **kwargs)
            except Exception as exc:
                # Recorded as cairn's, redacted and classified, as ctx.llm's are.
                mapped = behind_framework(exc, provider="openai-agents")
                if mapped is None:
                    raise
                raise mapped from None
            return encode_response(response, name, state)

        run = state.run
        meter = _meter(run, name, state, args, kwargs)
        label = f"agents-sdk model {name}"
        machine = step_machine(run, "llm", label, send, (), {}, state.retry, limit=meter)
        try:
            recorded = await adrive(machine, run.clock)
        except CairnError as exc:
            state.failure = exc  # raised by run() as it is, whatever the SDK makes of it
            raise
        response = decode_response(recorded)
        state.model_returned(response)
        return response

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        """The streamed call as the same recorded entry (``_streamed``)."""
        state, name = self._state, self.model
        args, kwargs = with_usage(args, kwargs)
        return recorded_stream(
            lambda: self.inner.stream_response(*args, **kwargs),
            state,
            name,
            lambda response: encode_response(response, name, state),
            decode_response,
        )

    async def close(self) -> None:
        await self.inner.close()


def _meter(
    run: TaskRun, name: str, state: RunState, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Meter | None:
    """The call's token limit (the app's for provider "openai" and this model)
    and budgets: what it reserves is its system instructions and input
    counted as JSON text, plus the model settings' max_tokens."""
    settings = args[2] if len(args) > 2 else kwargs.get("model_settings")
    return framework_meter(
        run,
        provider="openai",
        model=name,
        prices=state.prices,
        prompt=lambda: [args[:2], kwargs.get("system_instructions"), kwargs.get("input")],
        max_tokens=getattr(settings, "max_tokens", None),
    )


class RecordedProvider(ModelProvider):
    """Wraps every model another provider hands out in a ``RecordedModel``."""

    def __init__(self, inner: ModelProvider, state: RunState) -> None:
        self.inner = inner
        self._state = state

    def get_model(self, model_name: str | None) -> Model:
        return RecordedModel(self.inner.get_model(model_name), self._state)

    async def aclose(self) -> None:
        await self.inner.aclose()
