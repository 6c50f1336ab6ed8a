"""Recorded model calls: ``ctx.llm(conv, ...)`` and ``ctx.llm_call(messages, ...)``.

Each call is a history entry of kind ``llm``, made by the step machine: the
first run sends the request and records the answer's usage and estimated cost;
a replay returns the recorded reply and sends nothing. Keys, headers and the
client itself are never recorded.

``ctx.llm(conv)`` first compacts the conversation if it is over its threshold,
then clears old tool results if the conversation has a policy for it
(``cairn.agent.clearing``), sends its active context (never over the
conversation's ``max_context``: ``cairn.agent.fallback``), appends the reply to it
(one row, with the usage beside it) and returns it. Its entry records the
usage, the cost, the tool results it cleared, and the input tokens the call
would have sent with nothing compacted or cleared (``uncompacted_input``, from
the provider's counts) with that saving's price (what ``cairn cost`` reports
as saved), but not the reply text, which lives in the conversation row alone.

``ctx.llm_call(messages)`` is the lower level: one request, no conversation;
its entry records the reply message with the usage.

Both return the reply, or an awaitable of it when the client (or the
conversation's summarizer) is async, as ``ctx.step`` does for async functions.

Token limits and budgets (``cairn.agent.metering``): a call counts against the
app's ``TokenRate`` it names with ``limit=`` (else one declared for its
provider and model, or its provider) and against its batch's and task's
budgets; it reserves its prompt plus ``max_tokens`` before it is sent, waits
(no attempt spent) while the limit has no room, parks its task when a budget
has none, and settles both to the reported usage when it returns.

Streaming: ``stream=True`` (or an ``on_chunk=`` callback, which implies it)
sends the request with ``stream=True`` and hands each piece of the reply's text
to ``on_chunk`` as it arrives; the entry is recorded when the stream has ended,
exactly as a call without streaming (the whole reply, its usage from the
stream's last event, its cost). On replay nothing is sent and ``on_chunk`` gets
the recorded text as one chunk, so the chunks a caller sees always join up to
``reply.content``, live or replayed. A stream cut short (the process killed,
the connection dropped) records nothing of its partial text: the call is made
again from the start, on the next attempt or the next run, and ``on_chunk``
sees the text again from its beginning. An error raised by ``on_chunk`` fails
the call without a retry (sending the request again would not fix it).
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cairn.agent._window import Row
from cairn.agent.clearing import Cleared
from cairn.agent.compaction import compaction_machine
from cairn.agent.fallback import over_bound_error
from cairn.agent.messages import Message, normalize
from cairn.agent.metering import meter_for
from cairn.agent.pricing import DEFAULT_PRICES, PriceTable, Usage
from cairn.agent.providers import (
    Completion,
    OnText,
    Provider,
    StreamingProvider,
    default_client,
    provider_for,
)
from cairn.agent.rate_headers import ProviderRoom
from cairn.agent.reply import Reply
from cairn.agent.summarize import is_async_summarizer
from cairn.agent.tokens import count_message, counter_for, describe_counter, is_exact
from cairn.engine.meter import Meter
from cairn.engine.run import Machine, adrive, drive, in_event_loop
from cairn.engine.steps import step_machine
from cairn.errors import ConfigurationError, Permanent
from cairn.retry import Retry

if TYPE_CHECKING:
    from cairn.agent.conversation import Conversation
    from cairn.context import Context
    from cairn.engine.run import TaskRun

Tools = Sequence[Mapping[str, Any]] | None


def digest(value: Any) -> str:
    """A short, stable hash of a JSON value (key order does not matter)."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def model_fingerprint(model: str, system: Any, tools: Tools) -> str:
    """What produced a model call's entry: the model, and hashes of the system
    text and the tool schemas (docs/versions.md). The conversation and the user
    messages are the call's input, not its code: they are not in it."""
    name = "_".join(str(model).split()) or "-"
    return f"model:{name} system:{digest(system)} tools:{digest(list(tools or []))}"


def tools_meta(conv: Conversation, tools: Tools) -> dict[str, Any]:
    """What a reply row records of the tools its call offered: their digest, and
    the schemas themselves the first time the conversation offers that set (a
    later call names the digest only), so that ``cairn fidelity`` can offer a
    probe exactly the tools the call had."""
    schemas = [dict(tool) for tool in tools or []]
    key = digest(schemas)
    if key in conv.tool_schemas:
        return {"tools": key}
    return {"tools": key, "tool_schemas": schemas}


def _system_of(messages: Sequence[Mapping[str, Any]]) -> list[Any]:
    return [m.get("content") for m in messages if m.get("role") in ("system", "developer")]


def _provider(client: Any) -> Provider:
    return provider_for(client if client is not None else default_client(is_async=in_event_loop()))


def _completion_meta(
    provider: Provider, completion: Completion, prices: PriceTable
) -> dict[str, Any]:
    return {
        "provider": provider.name,
        "model": completion.model,
        "usage": completion.usage.to_dict(),
        "cost": prices.cost(completion.model, completion.usage),
        "finish_reason": completion.finish_reason,
    }


class Chunks:
    """Hands the pieces of a streamed reply to the caller's ``on_chunk``, and
    remembers whether any came live (a replayed call gets its text as one chunk
    afterwards, ``replayed``). An error of ``on_chunk``'s is raised as
    ``Permanent``: the call is not retried for it."""

    __slots__ = ("live", "on_chunk", "tap")

    def __init__(self, on_chunk: OnText | None, tap: Callable[[str], None] | None = None) -> None:
        self.on_chunk = on_chunk
        self.live = False
        # Where live pieces also go: the engine's observer (cairn.observe.lane).
        self.tap = tap

    def __call__(self, text: str) -> Any:
        self.live = True
        if self.tap is not None:
            self.tap(text)
        if self.on_chunk is None:
            return None
        try:
            result = self.on_chunk(text)
        except Exception as exc:
            raise _callback_failed(exc) from exc
        if inspect.isawaitable(result):
            return self._awaited(result)
        return None

    async def _awaited(self, result: Awaitable[Any]) -> None:
        try:
            await result
        except Exception as exc:
            raise _callback_failed(exc) from exc

    def replayed(self, reply: Reply) -> Any:
        """After the call: its recorded text as one chunk, if none came live."""
        if self.live or not reply.content:
            return None
        self.tap = None  # recorded text is not live: watchers see only live pieces
        result = self(reply.content)
        self.live = False
        return result


def _callback_failed(exc: Exception) -> Permanent:
    return Permanent(f"on_chunk raised {type(exc).__name__}: {exc}")


def _chunks(
    stream: bool, on_chunk: OnText | None, provider: Provider, run: TaskRun, name: str
) -> Chunks | None:
    """What streams the call, or None when it is not streamed; each live piece
    is also told to the app's observer as a ``call_chunk`` of entry ``name``."""
    if on_chunk is not None and not callable(on_chunk):
        raise ConfigurationError(f"on_chunk= must be a callable, not {type(on_chunk).__name__}")
    if not stream and on_chunk is None:
        return None
    if inspect.iscoroutinefunction(on_chunk) and not provider.is_async:
        raise ConfigurationError(
            "on_chunk= is an async function but the client is sync: pass a plain "
            "function, or an async client (openai.AsyncOpenAI, anthropic.AsyncAnthropic)"
        )
    return Chunks(
        on_chunk, lambda text: run.observe("call_chunk", run.seq, "llm", name, value=text)
    )


def _request(
    provider: Provider,
    messages: list[Message],
    model: str,
    tools: Tools,
    params: Mapping[str, Any],
    chunks: Chunks | None,
) -> Any:
    """The provider's completion (or an awaitable of it), streamed into ``chunks``
    if there are any. A provider without ``stream`` answers in one piece, handed
    over as one chunk."""
    if chunks is None:
        return provider.complete(messages, model=model, tools=tools, params=params)
    if isinstance(provider, StreamingProvider):
        return provider.stream(messages, model=model, tools=tools, params=params, on_text=chunks)
    pending = provider.complete(messages, model=model, tools=tools, params=params)
    if provider.is_async:
        return _one_chunk_async(pending, chunks)  # type: ignore[arg-type]
    return _one_chunk(pending, chunks)  # type: ignore[arg-type]


def _one_chunk(completion: Completion, chunks: Chunks) -> Completion:
    text = completion.message.get("content")
    if isinstance(text, str) and text:
        chunks(text)
    return completion


async def _one_chunk_async(pending: Awaitable[Completion], chunks: Chunks) -> Completion:
    completion = await pending
    text = completion.message.get("content")
    if isinstance(text, str) and text:
        result = chunks(text)
        if inspect.isawaitable(result):
            await result
    return completion


def _sender(
    provider: Provider,
    prepare: Callable[[], tuple[dict[str, Any] | None, list[Message]]],
    finish: Callable[[Completion], dict[str, Any]],
    model: str,
    tools: Tools,
    params: Mapping[str, Any],
    chunks: Chunks | None = None,
    said: list[ProviderRoom | None] | None = None,
) -> Callable[[], Any]:
    """The function the step machine calls: send (unless ``prepare`` found the
    answer already stored) and record. Async when the provider is. ``said``
    gets the room the answer's rate-limit headers said is left (for the meter)."""
    heard = said if said is not None else []

    def noted(completion: Completion) -> dict[str, Any]:
        heard[:] = [completion.room]
        return finish(completion)

    if provider.is_async:

        async def send_async() -> dict[str, Any]:
            found, messages = prepare()
            if found is not None:
                return found
            pending = _request(provider, messages, model, tools, params, chunks)
            return noted(await pending)

        return send_async

    def send() -> dict[str, Any]:
        found, messages = prepare()
        if found is not None:
            return found
        return noted(_request(provider, messages, model, tools, params, chunks))

    return send


def _last(said: list[ProviderRoom | None]) -> Callable[[], ProviderRoom | None]:
    return lambda: said[-1] if said else None


def _handed_back(
    reply: Reply | Awaitable[Reply], chunks: Chunks | None
) -> Reply | Awaitable[Reply]:
    """The reply, after a replayed call's text went to ``on_chunk`` as one chunk."""
    if chunks is None:
        return reply
    if inspect.isawaitable(reply):
        return _handed_back_async(reply, chunks)
    chunks.replayed(reply)
    return reply


async def _handed_back_async(pending: Awaitable[Reply], chunks: Chunks) -> Reply:
    reply = await pending
    result = chunks.replayed(reply)
    if inspect.isawaitable(result):
        await result
    return reply


# -- ctx.llm ---------------------------------------------------------------------------------
def _reply_tokens(conv: Conversation, message: Message, usage: Usage) -> int:
    """The reply's tokens as the next prompt holds it: an exact counter's count
    (framing included, which the provider's output tokens leave out), else the
    provider's count, else the estimate."""
    if is_exact(conv.counter) or usage.estimated:
        return count_message(message, conv.counter)
    return usage.output_tokens


def _reply_meta(
    conv: Conversation,
    provider: Provider,
    completion: Completion,
    prices: PriceTable,
    tools: Tools,
) -> dict[str, Any]:
    """What a reply row records beside the message: the usage and cost, the
    context's size, the input the call would have sent uncompacted and that
    saving's price, the tools offered, and which counter counted the rows."""
    stats = conv.stats
    meta = _completion_meta(provider, completion, prices)
    meta.update(context_tokens=stats.active_tokens, full_tokens=stats.full_tokens)
    usage = completion.usage
    uncompacted = conv.uncompacted_input(usage.input_tokens)
    meta["uncompacted_input"] = uncompacted
    saved = uncompacted - usage.input_tokens
    meta["saved_cost"] = prices.saving(completion.model, saved, usage.cached_tokens)
    meta.update(tools_meta(conv, tools), counter=describe_counter(conv.counter))
    return meta


def _conversation_call(
    conv: Conversation,
    provider: Provider,
    model: str,
    tools: Tools,
    params: Mapping[str, Any],
    retry: Retry,
    prices: PriceTable,
    chunks: Chunks | None = None,
    limit: str | None = None,
) -> Machine[Reply]:
    yield from compaction_machine(conv)
    # Decided once per call, before the first attempt (a retry sends the same
    # context), and recorded in the reply row (cairn.agent.clearing).
    cleared: list[Cleared] = []

    def prepare() -> tuple[dict[str, Any] | None, list[Message]]:
        if conv.replaying:
            # The reply row is stored, its entry is not (a crash between the two
            # commits): take the stored reply; the request is not sent again.
            row = conv.row_at(conv.position)
            if row.role != "assistant" or row.meta is None:
                conv.diverge(row, f"the reply of a call to {model!r}")
            return {"idx": row.idx, **row.meta}, []
        if not cleared:
            cleared.append(conv.clear_tool_results())
        if conv.tokens > conv.max_context:
            # Even the fallback could not fold enough (cairn.agent.fallback).
            raise Permanent(over_bound_error(conv.name, conv.tokens, conv.max_context))
        return None, conv.messages

    def finish(completion: Completion) -> dict[str, Any]:
        meta = _reply_meta(conv, provider, completion, prices, tools)
        if cleared and cleared[0]:
            meta["cleared"] = cleared[0]
        message = normalize(completion.message)
        row = Row(conv.position, message, _reply_tokens(conv, message, completion.usage), meta=meta)
        conv.write(row)
        return {"idx": row.idx, **meta}

    said: list[ProviderRoom | None] = []
    send = _sender(provider, prepare, finish, model, tools, params, chunks, said)
    meter = _conversation_meter(conv, provider, model, tools, params, prices, limit, said)
    outcome = yield from step_machine(
        conv._run,
        "llm",
        f"llm {conv.name}",
        send,
        (),
        {},
        retry,
        limit=meter,
        fingerprint=model_fingerprint(model, conv.system_prompt, tools),
    )
    row = conv.row_at(int(outcome["idx"]))
    if row.idx != conv.position or row.role != "assistant":
        conv.diverge(row, f"the reply of a call to {model!r}")
    conv.take(row)
    return Reply.from_record(row.message, outcome)


def _conversation_meter(
    conv: Conversation,
    provider: Provider,
    model: str,
    tools: Tools,
    params: Mapping[str, Any],
    prices: PriceTable,
    limit: str | None,
    said: list[ProviderRoom | None],
) -> Meter | None:
    """The call's token limit and budgets: its prompt is the conversation's
    active context right before each try (none while it replays a stored reply);
    ``said`` the room the provider's answer said is left."""
    return meter_for(
        conv._run,
        provider=provider.name,
        model=model,
        tools=tools,
        params=params,
        prices=prices,
        counter=conv.counter,
        messages=lambda: None if conv.replaying else conv.messages,
        limit=limit,
        room=_last(said),
    )


def llm(
    ctx: Context,
    conv: Conversation,
    *,
    model: str,
    tools: Tools = None,
    client: Any = None,
    prices: PriceTable | None = None,
    retry: Retry | None = None,
    stream: bool = False,
    on_chunk: OnText | None = None,
    limit: str | None = None,
    **params: Any,
) -> Reply | Awaitable[Reply]:
    """``ctx.llm``: compact if due, send ``conv``'s active context, append the reply."""
    provider = _provider(client if client is not None else conv.client)
    chunks = _chunks(stream, on_chunk, provider, ctx._run, f"llm {conv.name}")
    machine = _conversation_call(
        conv,
        provider,
        model,
        tools,
        params,
        retry or ctx._default_step_retry,
        prices or conv.prices,
        chunks,
        limit,
    )
    run: TaskRun = ctx._run
    if provider.is_async or is_async_summarizer(conv.summarizer):
        return _handed_back(adrive(machine, run.clock), chunks)
    return _handed_back(drive(machine, run.clock), chunks)


# -- ctx.llm_call -------------------------------------------------------------------------
def llm_call(
    ctx: Context,
    messages: Sequence[Mapping[str, Any]],
    *,
    model: str,
    tools: Tools = None,
    client: Any = None,
    prices: PriceTable | None = None,
    retry: Retry | None = None,
    name: str = "llm",
    stream: bool = False,
    on_chunk: OnText | None = None,
    limit: str | None = None,
    **params: Any,
) -> Reply | Awaitable[Reply]:
    """``ctx.llm_call``: one recorded request, outside any conversation."""
    provider = _provider(client)
    chunks = _chunks(stream, on_chunk, provider, ctx._run, name)
    table = prices or DEFAULT_PRICES
    request = [normalize(m) for m in messages]

    def prepare() -> tuple[dict[str, Any] | None, list[Message]]:
        return None, request

    def finish(completion: Completion) -> dict[str, Any]:
        meta = _completion_meta(provider, completion, table)
        return {"message": normalize(completion.message), **meta}

    said: list[ProviderRoom | None] = []
    send = _sender(provider, prepare, finish, model, tools, params, chunks, said)
    run: TaskRun = ctx._run
    printed = model_fingerprint(model, _system_of(request), tools)
    meter = meter_for(
        run,
        provider=provider.name,
        model=model,
        tools=tools,
        params=params,
        prices=table,
        counter=counter_for(model),
        messages=lambda: request,
        limit=limit,
        room=_last(said),
    )
    machine = _single_call(run, name, send, retry or ctx._default_step_retry, printed, meter)
    if provider.is_async:
        return _handed_back(adrive(machine, run.clock), chunks)
    return _handed_back(drive(machine, run.clock), chunks)


def _single_call(
    run: TaskRun,
    name: str,
    send: Callable[[], Any],
    retry: Retry,
    fingerprint: str,
    meter: Meter | None = None,
) -> Machine[Reply]:
    outcome = yield from step_machine(
        run, "llm", name, send, (), {}, retry, limit=meter, fingerprint=fingerprint
    )
    return Reply.from_record(outcome["message"], outcome)
