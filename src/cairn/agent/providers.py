"""Model providers behind one small interface: the openai and anthropic SDKs.

Both SDKs are optional extras (``pip install 'cairn-durable[openai]'``,
``'cairn-durable[anthropic]'``) and imported only when used. Any
OpenAI-compatible endpoint works through the openai SDK's ``base_url``:
OpenAI itself, vLLM, Ollama, a llama.cpp server.

Messages are kept in the OpenAI chat shape everywhere in cairn; the Anthropic
provider converts them on the way out and the reply on the way back. Clients
are never recorded: no key, header or URL reaches the store.
"""

from __future__ import annotations

import inspect
import json
import os
import threading
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from cairn.agent.messages import SYSTEM_ROLES, Message, text_of
from cairn.agent.pricing import Usage
from cairn.agent.provider_errors import client_secrets, is_sdk_error, provider_error
from cairn.agent.tokens import count_message, count_messages, counter_for
from cairn.errors import ConfigurationError

ANTHROPIC_DEFAULT_MAX_TOKENS = 4096


@dataclass(frozen=True, slots=True)
class Completion:
    """A provider's answer: the assistant message (OpenAI shape) and its usage."""

    message: Message
    usage: Usage
    model: str
    finish_reason: str | None = None


@runtime_checkable
class Provider(Protocol):
    """Sends a chat request. ``complete`` returns a ``Completion``, or an awaitable
    of one when ``is_async`` is True."""

    name: str
    is_async: bool

    def complete(
        self,
        messages: Sequence[Message],
        *,
        model: str,
        tools: Sequence[Mapping[str, Any]] | None,
        params: Mapping[str, Any],
    ) -> Completion | Awaitable[Completion]: ...


def _estimated(messages: Sequence[Message], reply: Message, model: str) -> Usage:
    """Usage when the provider reported none: counted by cairn (exactly for an
    OpenAI model with the tokens extra), and marked as not the provider's."""
    counter = counter_for(model)
    return Usage(
        count_messages(messages, counter), count_message(reply, counter), 0, estimated=True
    )


def _send(provider: str, client: Any, create: Any, **kwargs: Any) -> Any:
    """``create(**kwargs)``, with an SDK error raised as cairn's own, redacted
    (``cairn.agent.provider_errors``)."""
    try:
        return create(**kwargs)
    except Exception as exc:
        if not is_sdk_error(exc):
            raise
        raise provider_error(exc, client_secrets(client), provider=provider) from None


async def _asend(provider: str, client: Any, create: Any, **kwargs: Any) -> Any:
    """``_send`` for an async SDK client."""
    try:
        return await create(**kwargs)
    except Exception as exc:
        if not is_sdk_error(exc):
            raise
        raise provider_error(exc, client_secrets(client), provider=provider) from None


def _is_async_client(client: Any, method: Any) -> bool:
    # The SDKs wrap their methods, so the class name is the reliable sign.
    return type(client).__name__.startswith("Async") or inspect.iscoroutinefunction(method)


# -- OpenAI and compatible endpoints ----------------------------------------------------
def openai_message(choice_message: Any) -> Message:
    """The assistant message of an openai SDK reply, with only the fields a request
    may send back (so it can go into the next request as it is)."""
    message: Message = {"role": "assistant", "content": choice_message.content}
    calls = getattr(choice_message, "tool_calls", None) or []
    if calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }
            for call in calls
        ]
    refusal = getattr(choice_message, "refusal", None)
    if refusal:
        message["refusal"] = refusal
    return message


def openai_usage(usage: Any) -> Usage | None:
    if usage is None:
        return None
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    return Usage(int(usage.prompt_tokens or 0), int(usage.completion_tokens or 0), int(cached or 0))


class OpenAIProvider:
    """The openai SDK's chat completions, sync (``OpenAI``) or async (``AsyncOpenAI``)."""

    name = "openai"

    def __init__(self, client: Any) -> None:
        self._client = client
        self.is_async = _is_async_client(client, client.chat.completions.create)

    def complete(
        self,
        messages: Sequence[Message],
        *,
        model: str,
        tools: Sequence[Mapping[str, Any]] | None,
        params: Mapping[str, Any],
    ) -> Completion | Awaitable[Completion]:
        kwargs = dict(params)
        if tools:
            kwargs["tools"] = list(tools)
        create = self._client.chat.completions.create
        if self.is_async:
            return self._acomplete(create, messages, model, kwargs)
        response = _send(
            self.name, self._client, create, model=model, messages=list(messages), **kwargs
        )
        return self._completion(messages, response)

    async def _acomplete(
        self, create: Any, messages: Sequence[Message], model: str, kwargs: dict[str, Any]
    ) -> Completion:
        response = await _asend(
            self.name, self._client, create, model=model, messages=list(messages), **kwargs
        )
        return self._completion(messages, response)

    def _completion(self, messages: Sequence[Message], response: Any) -> Completion:
        choice = response.choices[0]
        reply = openai_message(choice.message)
        model = str(response.model)
        usage = openai_usage(getattr(response, "usage", None)) or _estimated(messages, reply, model)
        return Completion(reply, usage, model, choice.finish_reason)


# -- Anthropic ----------------------------------------------------------------------------
def _blocks(message: Message) -> list[dict[str, Any]]:
    role = message["role"]
    if role == "tool":
        return [
            {
                "type": "tool_result",
                "tool_use_id": message["tool_call_id"],
                "content": text_of(message),
            }
        ]
    blocks: list[dict[str, Any]] = []
    content = message.get("content")
    if isinstance(content, str):
        if content:
            blocks.append({"type": "text", "text": content})
    elif isinstance(content, Sequence):
        blocks += [{"type": "text", "text": p["text"]} for p in content if p.get("text")]
    for call in message.get("tool_calls") or ():
        function = call["function"]
        arguments = function.get("arguments") or "{}"
        blocks.append(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": function["name"],
                "input": json.loads(arguments),
            }
        )
    return blocks


def to_anthropic(messages: Sequence[Message]) -> tuple[str | None, list[dict[str, Any]]]:
    """(system text, messages) in Anthropic's shape: system prompts lifted out, tool
    results as user turns, and turns of the same role merged."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message["role"] in SYSTEM_ROLES:
            system.append(text_of(message))
            continue
        role = "assistant" if message["role"] == "assistant" else "user"
        blocks = _blocks(message)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += blocks
        else:
            turns.append({"role": role, "content": blocks})
    return ("\n\n".join(system) or None), turns


def anthropic_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI function tools as Anthropic tools."""
    converted = []
    for tool in tools:
        function = tool.get("function", tool)
        converted.append(
            {
                "name": function["name"],
                "description": function.get("description", ""),
                "input_schema": function.get("parameters") or {"type": "object"},
            }
        )
    return converted


def from_anthropic(response: Any) -> tuple[Message, Usage]:
    """An Anthropic reply as an OpenAI-shaped assistant message, and its usage."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in response.content:
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "tool_use":
            arguments = json.dumps(block.input, ensure_ascii=False)
            calls.append(
                {
                    "id": block.id,
                    "type": "function",
                    "function": {"name": block.name, "arguments": arguments},
                }
            )
    message: Message = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        message["tool_calls"] = calls
    raw = response.usage
    cached = int(getattr(raw, "cache_read_input_tokens", None) or 0)
    created = int(getattr(raw, "cache_creation_input_tokens", None) or 0)
    usage = Usage(int(raw.input_tokens) + cached + created, int(raw.output_tokens), cached)
    return message, usage


class AnthropicProvider:
    """The anthropic SDK's messages API, sync (``Anthropic``) or async (``AsyncAnthropic``)."""

    name = "anthropic"

    def __init__(self, client: Any) -> None:
        self._client = client
        self.is_async = _is_async_client(client, client.messages.create)

    def complete(
        self,
        messages: Sequence[Message],
        *,
        model: str,
        tools: Sequence[Mapping[str, Any]] | None,
        params: Mapping[str, Any],
    ) -> Completion | Awaitable[Completion]:
        system, turns = to_anthropic(messages)
        kwargs = dict(params)
        kwargs.setdefault(
            "max_tokens", kwargs.pop("max_completion_tokens", ANTHROPIC_DEFAULT_MAX_TOKENS)
        )
        if system is not None:
            kwargs["system"] = system
        if tools:
            kwargs["tools"] = anthropic_tools(tools)
        create = self._client.messages.create
        if self.is_async:
            return self._acomplete(create, model, turns, kwargs)
        return self._completion(
            _send(self.name, self._client, create, model=model, messages=turns, **kwargs)
        )

    async def _acomplete(
        self, create: Any, model: str, turns: list[dict[str, Any]], kwargs: dict[str, Any]
    ) -> Completion:
        response = await _asend(
            self.name, self._client, create, model=model, messages=turns, **kwargs
        )
        return self._completion(response)

    def _completion(self, response: Any) -> Completion:
        message, usage = from_anthropic(response)
        return Completion(message, usage, str(response.model), response.stop_reason)


# -- choosing a provider --------------------------------------------------------------------
def provider_for(client: Any) -> Provider:
    """The provider for ``client``: an openai or anthropic SDK client, or a ``Provider``."""
    if isinstance(client, Provider):
        return client
    module = type(client).__module__.split(".", 1)[0]
    if module == "openai":
        return OpenAIProvider(client)
    if module == "anthropic":
        return AnthropicProvider(client)
    raise ConfigurationError(
        f"cairn cannot call a model through {type(client).__qualname__}: pass an openai "
        "client (openai.OpenAI / AsyncOpenAI, for any OpenAI-compatible endpoint), an "
        "anthropic client (anthropic.Anthropic / AsyncAnthropic), or an object with the "
        "cairn.agent.Provider interface."
    )


_default_lock = threading.Lock()
_defaults: dict[bool, Any] = {}


def default_client(*, is_async: bool = False) -> Any:
    """A client built from the environment, once per process: the openai SDK when
    ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` is set, else the anthropic SDK when
    ``ANTHROPIC_API_KEY`` (or ``ANTHROPIC_BASE_URL``) is."""
    with _default_lock:
        if is_async not in _defaults:
            _defaults[is_async] = _client_from_environment(is_async)
        return _defaults[is_async]


def _client_from_environment(is_async: bool) -> Any:
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
        openai = _import("openai")
        cls = openai.AsyncOpenAI if is_async else openai.OpenAI
        # A local server (vLLM, Ollama) needs no key, but the SDK insists on one.
        return cls(api_key=os.environ.get("OPENAI_API_KEY") or "not-needed")
    if os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_BASE_URL"):
        anthropic = _import("anthropic")
        cls = anthropic.AsyncAnthropic if is_async else anthropic.Anthropic
        return cls(api_key=os.environ.get("ANTHROPIC_API_KEY") or "not-needed")
    raise ConfigurationError(
        "no model client: pass client= (an openai or anthropic SDK client), or set "
        "OPENAI_API_KEY / OPENAI_BASE_URL (any OpenAI-compatible endpoint) or "
        "ANTHROPIC_API_KEY in the environment."
    )


def _import(name: str) -> Any:
    try:
        return __import__(name)
    except ImportError as exc:
        raise ConfigurationError(
            f"calling models through {name} needs its SDK: pip install 'cairn-durable[{name}]'"
        ) from exc
