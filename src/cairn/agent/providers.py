"""Model providers behind one small interface: the openai and anthropic SDKs.

Both SDKs are optional extras (``pip install 'cairn-durable[openai]'``,
``'cairn-durable[anthropic]'``) and imported only when used. Any
OpenAI-compatible endpoint works through the openai SDK's ``base_url``:
OpenAI itself, vLLM, Ollama, a llama.cpp server.

Messages are kept in the OpenAI chat shape everywhere in cairn; the Anthropic
provider converts them on the way out and the reply on the way back. Clients
are never recorded: no key, header or URL reaches the store.

A provider may also ``stream``: send the request with ``stream=True``, hand each
piece of the reply's text to ``on_text`` as it arrives, and return the whole
``Completion`` once the stream has ended (usage from the stream's last event:
OpenAI's ``stream_options={"include_usage": True}`` chunk, Anthropic's
``message_delta``). A stream that breaks off (the connection dropped, an error
event, an end without its finish) raises ``Transient``: the call may be made
again, from the start. Once the reply is whole (OpenAI's finish reason came,
or Anthropic's ``message_delta``) a break is not one: only the end marker, or
OpenAI's usage chunk (then estimated), is missing, and the reply is kept
rather than bought again.

Each answer's rate-limit headers (``cairn.agent.rate_headers``) come back on
the ``Completion`` as ``room``: a non-streamed request goes through the SDK's
``with_raw_response`` (which keeps the headers; a client without it is called
as it is), a streamed one's headers are on its response.
"""

from __future__ import annotations

import inspect
import json
import os
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from cairn.agent.messages import SYSTEM_ROLES, Message, text_of
from cairn.agent.pricing import Usage
from cairn.agent.provider_errors import (
    client_secrets,
    excerpt,
    is_sdk_error,
    malformed_answer,
    provider_error,
    redact,
)
from cairn.agent.rate_headers import ProviderRoom, room_of
from cairn.agent.tokens import count_message, count_messages, counter_for
from cairn.errors import ConfigurationError, RetryAfter, Transient
from cairn.redaction import register_from

ANTHROPIC_DEFAULT_MAX_TOKENS = 4096


@dataclass(frozen=True, slots=True)
class Completion:
    """A provider's answer: the assistant message (OpenAI shape) and its usage."""

    message: Message
    usage: Usage
    model: str
    finish_reason: str | None = None
    # What the answer's rate-limit headers said is left (None: they said nothing).
    room: ProviderRoom | None = None


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


OnText = Callable[[str], Any]


def valid_text(text: str) -> str:
    """``text`` as valid Unicode: the halves of a UTF-16 pair that came apart
    (a reply's JSON may escape an emoji as two ``\\uXXXX``, and a stream may
    cut between them) joined again, and a lone half replaced by U+FFFD, as a
    UTF-8 decoder does with a broken sequence. No store can write a lone
    surrogate, and a reply is paid for: it is kept, not refused."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def _valid_message(message: Message) -> Message:
    """A reply's message with every text in it valid (``valid_text``): its
    content, refusal, and each tool call's name and arguments."""
    for key in ("content", "refusal"):
        if isinstance(message.get(key), str):
            message[key] = valid_text(message[key])
    for call in message.get("tool_calls") or ():
        function = call["function"]
        for key in ("name", "arguments"):
            if isinstance(function.get(key), str):
                function[key] = valid_text(function[key])
    return message


@runtime_checkable
class StreamingProvider(Provider, Protocol):
    """A ``Provider`` that can also stream: ``stream`` hands each piece of the
    reply's text to ``on_text`` as it arrives and returns the whole
    ``Completion`` (an awaitable of it when ``is_async``; there ``on_text`` may
    return an awaitable, which is awaited)."""

    def stream(
        self,
        messages: Sequence[Message],
        *,
        model: str,
        tools: Sequence[Mapping[str, Any]] | None,
        params: Mapping[str, Any],
        on_text: OnText,
    ) -> Completion | Awaitable[Completion]: ...


def _send(provider: str, client: Any, create: Any, **kwargs: Any) -> Any:
    """``create(**kwargs)``, with an SDK error raised as cairn's own, redacted
    (``cairn.agent.provider_errors``), and an answer the SDK could not parse as
    ``MalformedAnswer``."""
    try:
        return create(**kwargs)
    except Exception as exc:
        mapped = _sent_error(provider, client, kwargs, exc)
        if mapped is None:
            raise
        raise mapped from None


async def _asend(provider: str, client: Any, create: Any, **kwargs: Any) -> Any:
    """``_send`` for an async SDK client."""
    try:
        return await create(**kwargs)
    except Exception as exc:
        mapped = _sent_error(provider, client, kwargs, exc)
        if mapped is None:
            raise
        raise mapped from None


def _headed(resource: Any, is_async: bool) -> Callable[..., Any]:
    """``resource.create`` returning (the answer, the ``room`` its rate-limit
    headers say is left), through ``with_raw_response`` when the client has it."""
    raw = getattr(getattr(resource, "with_raw_response", None), "create", None)
    create = resource.create
    if is_async:

        async def acall(**kwargs: Any) -> tuple[Any, ProviderRoom | None]:
            if raw is None:
                return await create(**kwargs), None
            response = await raw(**kwargs)
            parsed = response.parse()  # async in the anthropic SDK, not in openai's
            if inspect.isawaitable(parsed):
                parsed = await parsed
            return parsed, room_of(getattr(response, "headers", None))

        return acall

    def call(**kwargs: Any) -> tuple[Any, ProviderRoom | None]:
        if raw is None:
            return create(**kwargs), None
        response = raw(**kwargs)
        return response.parse(), room_of(getattr(response, "headers", None))

    return call


def _stream_room(stream: Any) -> ProviderRoom | None:
    """The room a streamed answer's headers say is left."""
    return room_of(getattr(getattr(stream, "response", None), "headers", None))


def _sent_error(
    provider: str, client: Any, kwargs: dict[str, Any], error: Exception
) -> Exception | None:
    """What a request that raised ``error`` raises instead: cairn's error for an
    SDK error, ``MalformedAnswer`` for an answer that is not JSON (the SDKs
    parse a JSON-typed body and let the ``JSONDecodeError`` out); None for any
    other error, which goes up as it is."""
    if is_sdk_error(error):
        return provider_error(error, client_secrets(client), provider=provider)
    if isinstance(error, json.JSONDecodeError):
        problem = f"the body is not JSON ({error.msg} at character {error.pos}): "
        return _malformed(provider, client, str(kwargs.get("model")), problem + excerpt(error.doc))
    return None


# What each API answers a request with.
_ANSWERS = {"openai": "a chat completion", "anthropic": "a message"}


def _malformed(provider: str, client: Any, model: str, problem: str) -> Exception:
    what = _ANSWERS.get(provider, "a model's answer")
    return malformed_answer(provider, model, what, problem, client_secrets(client))


def _not_json(response: Any) -> str | None:
    """What is wrong with an answer the SDK handed over as text (it does so for
    a body whose content type is not JSON), or None."""
    if isinstance(response, str | bytes):
        return f"the body is not JSON: {excerpt(response)}"
    return None


def _openai_problem(response: Any) -> str | None:
    """What keeps ``response`` from being a chat completion, or None."""
    problem = _not_json(response)
    if problem is not None:
        return problem
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list) or not choices:
        error = getattr(response, "error", None)
        if error is not None:
            return f"it carries an error in place of the completion: {excerpt(error)}"
        lacking = "no choices" if choices is None else "an empty list of choices"
        return f"it has {lacking}: {excerpt(response)}"
    if getattr(choices[0], "message", None) is None:
        return f"its first choice has no message: {excerpt(choices[0])}"
    return None


def _anthropic_problem(response: Any) -> str | None:
    """What keeps ``response`` from being an Anthropic message, or None."""
    problem = _not_json(response)
    if problem is not None:
        return problem
    if not isinstance(getattr(response, "content", None), list):
        error = getattr(response, "error", None)
        if error is not None:
            return f"it carries an error in place of the message: {excerpt(error)}"
        return f"it has no content: {excerpt(response)}"
    return None


# The HTTP libraries under the SDKs (httpx2 and httpcore2 under their newer releases).
_HTTP_LIBRARIES = ("httpx", "httpcore", "httpx2", "httpcore2")


def _stream_error(provider: str, client: Any, error: Exception) -> Exception | None:
    """cairn's error for ``error``, raised while a stream was being read, or None
    if it is not the SDK's nor its HTTP library's (then it goes up as it is). A
    stream that broke off may be asked again: anything but a ``RetryAfter`` is
    ``Transient`` (an SDK error event mid-stream carries no HTTP status)."""
    library = type(error).__module__.split(".", 1)[0]
    if is_sdk_error(error):
        mapped = provider_error(error, client_secrets(client), provider=provider)
        if isinstance(mapped, RetryAfter):
            return mapped
        transient = Transient(f"{mapped} (while the reply was streamed)")
        vars(transient)["provider_error"] = error
        return transient
    if library in _HTTP_LIBRARIES:
        text = redact(f"{provider} {type(error).__name__} while the reply was streamed: {error}")
        return Transient(text)
    return None


class _Reply(Protocol):
    """A reply put together from a stream's events."""

    @property
    def complete(self) -> bool:
        """Whether the reply is whole: what may still be missing adds nothing
        to it (the stream's end marker; OpenAI's usage chunk, estimated then)."""
        ...

    def add(self, event: Any) -> str:
        """Take one event in; the text it adds to the reply ("" if none)."""
        ...


def _broken_off(provider: str, client: Any, reply: _Reply, error: Exception) -> Exception | None:
    """What to raise for ``error``, met while reading a stream: None when the
    reply was complete already (the connection dropped before only the end
    marker: the reply is kept, not bought again), else cairn's error for it
    (``_stream_error``), or ``error`` itself if it is not the SDK's."""
    if reply.complete:
        return None
    return _stream_error(provider, client, error) or error


def _read(provider: str, client: Any, stream: Any, reply: _Reply) -> Iterator[str]:
    """The text each event of an SDK stream adds to ``reply``, the stream's
    errors as cairn's (``_broken_off``). Only the reading is guarded: an error
    of the caller's between two events is its own. The caller closes the stream."""
    iterator = iter(stream)
    while True:
        try:
            event = next(iterator)
        except StopIteration:
            return
        except Exception as exc:
            raised = _broken_off(provider, client, reply, exc)
            if raised is None:
                return
            if raised is exc:
                raise
            raise raised from None
        text = reply.add(event)
        if text:
            yield text


async def _aread(
    provider: str, client: Any, stream: Any, reply: _Reply
) -> AsyncGenerator[str, None]:
    """``_read`` for an async SDK stream."""
    iterator = stream.__aiter__()
    while True:
        try:
            event = await iterator.__anext__()
        except StopAsyncIteration:
            return
        except Exception as exc:
            raised = _broken_off(provider, client, reply, exc)
            if raised is None:
                return
            if raised is exc:
                raise
            raise raised from None
        text = reply.add(event)
        if text:
            yield text


def _close(stream: Any) -> None:
    close = getattr(stream, "close", None)
    if callable(close):
        close()


async def _aclose(stream: Any) -> None:
    close = getattr(stream, "close", None)
    if callable(close):
        result = close()
        if inspect.isawaitable(result):
            await result


def _incomplete(provider: str) -> Transient:
    return Transient(f"{provider}: the streamed reply ended before it was complete")


async def _handed(on_text: OnText, text: str) -> None:
    """``on_text(text)``, awaited if it returned an awaitable (an async callback)."""
    result = on_text(text)
    if inspect.isawaitable(result):
        await result


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
        create = _headed(self._client.chat.completions, self.is_async)
        if self.is_async:
            return self._acomplete(create, messages, model, kwargs)
        response, room = _send(
            self.name, self._client, create, model=model, messages=list(messages), **kwargs
        )
        return replace(self._completion(messages, model, response), room=room)

    async def _acomplete(
        self, create: Any, messages: Sequence[Message], model: str, kwargs: dict[str, Any]
    ) -> Completion:
        response, room = await _asend(
            self.name, self._client, create, model=model, messages=list(messages), **kwargs
        )
        return replace(self._completion(messages, model, response), room=room)

    def _completion(self, messages: Sequence[Message], asked: str, response: Any) -> Completion:
        """The completion ``response`` answers to a request for model ``asked``
        (``MalformedAnswer`` if it is none)."""
        problem = _openai_problem(response)
        if problem is not None:
            raise _malformed(self.name, self._client, asked, problem)
        choice = response.choices[0]
        reply = openai_message(choice.message)
        model = str(getattr(response, "model", None) or asked)
        usage = openai_usage(getattr(response, "usage", None)) or _estimated(messages, reply, model)
        return Completion(_valid_message(reply), usage, model, choice.finish_reason)

    def stream(
        self,
        messages: Sequence[Message],
        *,
        model: str,
        tools: Sequence[Mapping[str, Any]] | None,
        params: Mapping[str, Any],
        on_text: OnText,
    ) -> Completion | Awaitable[Completion]:
        kwargs = dict(params)
        if tools:
            kwargs["tools"] = list(tools)
        kwargs["stream"] = True
        # The usage comes in a last chunk of its own, only when asked for (an
        # endpoint that refuses the option: stream_options={"include_usage": False},
        # and the usage is estimated).
        options = dict(kwargs.get("stream_options") or {})
        options.setdefault("include_usage", True)
        kwargs["stream_options"] = options
        create = self._client.chat.completions.create
        if self.is_async:
            return self._astream(create, messages, model, kwargs, on_text)
        stream = _send(
            self.name, self._client, create, model=model, messages=list(messages), **kwargs
        )
        reply = _OpenAIStream(model)
        try:
            for text in _read(self.name, self._client, stream, reply):
                on_text(text)
        finally:
            _close(stream)
        return replace(reply.completion(self.name, messages), room=_stream_room(stream))

    async def _astream(
        self,
        create: Any,
        messages: Sequence[Message],
        model: str,
        kwargs: dict[str, Any],
        on_text: OnText,
    ) -> Completion:
        stream = await _asend(
            self.name, self._client, create, model=model, messages=list(messages), **kwargs
        )
        reply = _OpenAIStream(model)
        texts = _aread(self.name, self._client, stream, reply)
        try:
            async for text in texts:
                await _handed(on_text, text)
        finally:
            await texts.aclose()
            await _aclose(stream)
        return replace(reply.completion(self.name, messages), room=_stream_room(stream))


class _OpenAIStream:
    """A chat completion put together from its streamed chunks."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.texts: list[str] = []
        self.refusals: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}
        self.finish: str | None = None
        self.usage: Usage | None = None

    @property
    def complete(self) -> bool:
        """The finish reason came: the reply is whole. Only the usage chunk (a
        missing one is estimated, as when it was not asked for) and ``[DONE]``
        may still be missing."""
        return self.finish is not None

    def add(self, chunk: Any) -> str:
        """Take one chunk in; the text it adds to the reply ("" if none)."""
        self.model = str(getattr(chunk, "model", None) or self.model)
        usage = openai_usage(getattr(chunk, "usage", None))
        if usage is not None:
            self.usage = usage
        # The first choice only, as unstreamed (n > 1 streams the others beside it).
        choice = next((c for c in getattr(chunk, "choices", None) or () if c.index == 0), None)
        if choice is None:
            return ""
        if choice.finish_reason:
            self.finish = str(choice.finish_reason)
        delta = choice.delta
        if delta is None:
            return ""
        for call in getattr(delta, "tool_calls", None) or ():
            slot = self.calls.setdefault(int(call.index), {"id": "", "name": "", "arguments": ""})
            if call.id:
                slot["id"] = call.id
            function = call.function
            if function is not None:
                if function.name and not slot["name"]:
                    slot["name"] = function.name
                slot["arguments"] += function.arguments or ""
        refusal = getattr(delta, "refusal", None)
        if refusal:
            self.refusals.append(refusal)
        text = delta.content or ""
        if text:
            self.texts.append(text)
        return str(text)

    def completion(self, provider: str, messages: Sequence[Message]) -> Completion:
        if self.finish is None:
            raise _incomplete(provider)
        message: Message = {"role": "assistant", "content": "".join(self.texts) or None}
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": slot["id"],
                    "type": "function",
                    "function": {"name": slot["name"], "arguments": slot["arguments"]},
                }
                for _, slot in sorted(self.calls.items())
            ]
        if self.refusals:
            message["refusal"] = "".join(self.refusals)
        usage = self.usage or _estimated(messages, message, self.model)
        return Completion(_valid_message(message), usage, self.model, self.finish)


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


def from_anthropic(response: Any) -> tuple[Message, Usage | None]:
    """An Anthropic reply as an OpenAI-shaped assistant message, and its usage
    (None when the answer carried none)."""
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
    raw = getattr(response, "usage", None)
    if raw is None:
        return message, None
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
        turns, kwargs = self._request(messages, tools, params)
        create = _headed(self._client.messages, self.is_async)
        if self.is_async:
            return self._acomplete(create, messages, model, turns, kwargs)
        response, room = _send(
            self.name, self._client, create, model=model, messages=turns, **kwargs
        )
        return replace(self._completion(messages, model, response), room=room)

    async def _acomplete(
        self,
        create: Any,
        messages: Sequence[Message],
        model: str,
        turns: list[dict[str, Any]],
        kwargs: dict[str, Any],
    ) -> Completion:
        response, room = await _asend(
            self.name, self._client, create, model=model, messages=turns, **kwargs
        )
        return replace(self._completion(messages, model, response), room=room)

    def _completion(self, messages: Sequence[Message], asked: str, response: Any) -> Completion:
        """The completion ``response`` answers to a request for model ``asked``
        (``MalformedAnswer`` if it is no message)."""
        problem = _anthropic_problem(response)
        if problem is not None:
            raise _malformed(self.name, self._client, asked, problem)
        message, usage = from_anthropic(response)
        model = str(getattr(response, "model", None) or asked)
        usage = usage or _estimated(messages, message, model)
        return Completion(_valid_message(message), usage, model, response.stop_reason)

    def _request(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None,
        params: Mapping[str, Any],
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        system, turns = to_anthropic(messages)
        kwargs = dict(params)
        kwargs.setdefault(
            "max_tokens", kwargs.pop("max_completion_tokens", ANTHROPIC_DEFAULT_MAX_TOKENS)
        )
        if system is not None:
            kwargs["system"] = system
        if tools:
            kwargs["tools"] = anthropic_tools(tools)
        return turns, kwargs

    def stream(
        self,
        messages: Sequence[Message],
        *,
        model: str,
        tools: Sequence[Mapping[str, Any]] | None,
        params: Mapping[str, Any],
        on_text: OnText,
    ) -> Completion | Awaitable[Completion]:
        turns, kwargs = self._request(messages, tools, params)
        kwargs["stream"] = True
        create = self._client.messages.create
        if self.is_async:
            return self._astream(create, messages, model, turns, kwargs, on_text)
        stream = _send(self.name, self._client, create, model=model, messages=turns, **kwargs)
        reply = _AnthropicStream(model)
        try:
            for text in _read(self.name, self._client, stream, reply):
                on_text(text)
        finally:
            _close(stream)
        return replace(reply.completion(self.name, messages), room=_stream_room(stream))

    async def _astream(
        self,
        create: Any,
        messages: Sequence[Message],
        model: str,
        turns: list[dict[str, Any]],
        kwargs: dict[str, Any],
        on_text: OnText,
    ) -> Completion:
        stream = await _asend(
            self.name, self._client, create, model=model, messages=turns, **kwargs
        )
        reply = _AnthropicStream(model)
        texts = _aread(self.name, self._client, stream, reply)
        try:
            async for text in texts:
                await _handed(on_text, text)
        finally:
            await texts.aclose()
            await _aclose(stream)
        return replace(reply.completion(self.name, messages), room=_stream_room(stream))


_ANTHROPIC_USAGE = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)


def _arguments(streamed: str) -> str:
    """A streamed tool call's input as ``from_anthropic`` writes it (the JSON text
    re-dumped); text that is not JSON is kept as it came."""
    try:
        value = json.loads(streamed or "{}")
    except ValueError:
        return streamed
    return json.dumps(value, ensure_ascii=False)


class _AnthropicStream:
    """An Anthropic message put together from its stream's events."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.blocks: dict[int, dict[str, Any]] = {}
        self.usage: dict[str, int] = {}
        self.stop_reason: str | None = None
        self.stopped = False

    @property
    def complete(self) -> bool:
        """``message_delta`` came, with the stop reason and the output tokens:
        only ``message_stop``, which carries nothing, may be missing."""
        return self.stopped or self.stop_reason is not None

    def _count(self, usage: Any) -> None:
        for name in _ANTHROPIC_USAGE:
            value = getattr(usage, name, None)
            if value is not None:
                self.usage[name] = int(value)

    def add(self, event: Any) -> str:
        """Take one event in; the text it adds to the reply ("" if none)."""
        kind = getattr(event, "type", None)
        if kind == "message_start":
            self.model = str(event.message.model or self.model)
            self._count(event.message.usage)
        elif kind == "content_block_start":
            block = event.content_block
            if block.type == "tool_use":
                self.blocks[event.index] = {"type": "tool_use", "id": block.id,
                                            "name": block.name, "json": ""}  # fmt: skip
            elif block.type == "text":
                self.blocks[event.index] = {"type": "text", "text": block.text or ""}
                return str(block.text or "")
        elif kind == "content_block_delta":
            block = self.blocks.get(event.index)
            delta = event.delta
            if block is None:
                return ""
            if delta.type == "text_delta" and block["type"] == "text":
                block["text"] += delta.text
                return str(delta.text)
            if delta.type == "input_json_delta" and block["type"] == "tool_use":
                block["json"] += delta.partial_json
        elif kind == "message_delta":
            self.stop_reason = event.delta.stop_reason or self.stop_reason
            self._count(event.usage)
        elif kind == "message_stop":
            self.stopped = True
        return ""

    def completion(self, provider: str, messages: Sequence[Message]) -> Completion:
        if not self.complete:
            raise _incomplete(provider)
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for _, block in sorted(self.blocks.items()):
            if block["type"] == "text":
                texts.append(block["text"])
                continue
            arguments = _arguments(block["json"])
            function = {"name": block["name"], "arguments": arguments}
            calls.append({"id": block["id"], "type": "function", "function": function})
        message: Message = {"role": "assistant", "content": "".join(texts) or None}
        if calls:
            message["tool_calls"] = calls
        return Completion(
            _valid_message(message), self._usage(messages, message), self.model, self.stop_reason
        )

    def _usage(self, messages: Sequence[Message], message: Message) -> Usage:
        """The stream's usage, or cairn's estimate when no event carried any."""
        counts = self.usage
        if not counts:
            return _estimated(messages, message, self.model)
        cached = counts.get("cache_read_input_tokens", 0)
        created = counts.get("cache_creation_input_tokens", 0)
        return Usage(counts.get("input_tokens", 0) + cached + created,
                     counts.get("output_tokens", 0), cached)  # fmt: skip


# -- choosing a provider --------------------------------------------------------------------
def provider_for(client: Any) -> Provider:
    """The provider for ``client``: an openai or anthropic SDK client, or a
    ``Provider``. Its credentials are registered as secrets first
    (``cairn.redaction``): nothing cairn stores or emits will hold them."""
    register_from(client)
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
