"""Streamed model calls: ``ctx.llm(conv, stream=True, on_chunk=...)`` and ``ctx.llm_call``.

Real openai and anthropic SDK clients, sync and async, against the simulated
model server on 127.0.0.1, which streams server-sent events one word per
event and counts every request. The chunks the caller gets, the reply that
is recorded, its usage and cost, what a replay hands over (the recorded text
as one chunk, no request), and a stream cut off mid-way (retried as a
transient error, the partial text never recorded).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from cairn import Cairn, Context, TaskFailed
from cairn.agent import Price, PriceTable, user
from cairn.agent.simulate import SimulatedModelServer, SimulatedProvider
from cairn.clock import FakeClock
from cairn.retry import NO_RETRY, Retry
from cairn.testing import set_fault_hook
from cairn.testing.servers import LocalServer, RequestHandler
from tests.agent_server import (
    API_KEY,
    READ_TOOL,
    Crash,
    Scripted,
    crash_at,
    model_server,
    resume,
)

TEXT = "The ledger balances: forty two entries, none of them late."
WORDS = ["The", " ledger", " balances:", " forty", " two", " entries,", " none", " of",
         " them", " late."]  # fmt: skip
PRICES = PriceTable({"tiny": Price(input=1.0, output=2.0)})
QUICK = Retry(attempts=3, initial_delay=0.0, jitter=0.0)
TOOL_CALL = {
    "role": "assistant",
    "content": "Let me look.",
    "tool_calls": [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "read_document", "arguments": '{"name": "doc-01 and more"}'},
        }
    ],
}


def client_for(server: SimulatedModelServer, api: str, *, is_async: bool = False) -> Any:
    """An SDK client of ``api`` on ``server``, without the SDK's own retries."""
    if api == "openai":
        cls: Any = openai.AsyncOpenAI if is_async else openai.OpenAI
        return cls(base_url=server.base_url, api_key=API_KEY, max_retries=0)
    cls = anthropic.AsyncAnthropic if is_async else anthropic.Anthropic
    return cls(base_url=server.anthropic_base_url, api_key=API_KEY, max_retries=0)


def history(app: Cairn, task_id: str) -> list[Any]:
    return [s for s in app.store.load_history(task_id).values() if s.kind == "llm"]


def expected_cost(usage: dict[str, Any]) -> float:
    return float(usage["input_tokens"] * 1.0 + usage["output_tokens"] * 2.0) / 1e6


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_chunks_arrive_in_order_and_the_reply_is_their_concatenation(app: Cairn, api: str) -> None:
    """Streamed through the real SDK, on_chunk gets the reply a word at a time,
    in order, while the request is open; the recorded reply is exactly their
    concatenation, its usage is the server's own count (not an estimate, from
    the stream's last events) and its cost is counted from it. The request
    asked for the stream (and, to OpenAI, for the usage chunk)."""
    chunks: list[str] = []
    with model_server(Scripted([TEXT])) as server:
        client = client_for(server, api)

        @app.task(name="ask")
        def ask(ctx: Context) -> dict[str, Any]:
            conv = ctx.conversation("main", system="Be brief.", client=client, prices=PRICES)
            conv.append(user("How is the ledger?"))
            reply = ctx.llm(conv, model="tiny", on_chunk=chunks.append)
            stored = conv.messages[-1]
            return {"content": reply.content, "usage": reply.usage.to_dict(),
                    "cost": reply.cost, "stored": stored["content"]}  # fmt: skip

        result = app.run(ask, task_id="a")
        body = server.bodies[0]
    assert chunks == WORDS
    assert result["content"] == "".join(chunks) == TEXT
    assert result["stored"] == TEXT
    usage = result["usage"]
    assert not usage["estimated"]
    assert usage["input_tokens"] == server.prompt_tokens
    assert usage["output_tokens"] == server.completion_tokens
    assert result["cost"] == pytest.approx(expected_cost(usage))
    assert (server.requests, server.streams) == (1, 1)
    assert body["stream"] is True
    if api == "openai":
        assert body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_replayed_call_hands_its_recorded_text_over_as_one_chunk_and_sends_nothing(
    app: Cairn, api: str
) -> None:
    """The task fails after its streamed calls and is retried: the replay sends
    no request, and on_chunk gets each recorded reply as one chunk, so the
    chunks of every run join up to the same text. Both ctx.llm and ctx.llm_call."""
    runs: list[list[str]] = []
    fail = [True]
    with model_server(Scripted([TEXT, "Second answer, also streamed."])) as server:
        client = client_for(server, api)

        @app.task(name="ask", retry=Retry(attempts=2, initial_delay=0.0, jitter=0.0))
        def ask(ctx: Context) -> list[str | None]:
            chunks: list[str] = []
            runs.append(chunks)
            conv = ctx.conversation("main", client=client)
            conv.append(user("first"))
            first = ctx.llm(conv, model="tiny", stream=True, on_chunk=chunks.append)
            second = ctx.llm_call(
                [user("second")], model="tiny", client=client, on_chunk=chunks.append
            )
            if fail[0]:
                fail[0] = False
                raise RuntimeError("fail after the calls, so the retry replays them")
            return [first.content, second.content]

        result = app.run(ask, task_id="a")
        assert server.requests == 2
    live, replayed = runs
    assert live == [*WORDS, "Second", " answer,", " also", " streamed."]
    assert replayed == [TEXT, "Second answer, also streamed."]
    assert result == [TEXT, "Second answer, also streamed."]


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_streamed_tool_call_is_recorded_as_the_unstreamed_one(app: Cairn, api: str) -> None:
    """A reply with text and a tool call, streamed (the arguments a few characters
    per event), is recorded with the same message as the same reply not streamed;
    only its text goes to on_chunk."""
    chunks: list[str] = []
    with model_server(Scripted([TOOL_CALL])) as server:
        client = client_for(server, api)

        @app.task(name="ask")
        def ask(ctx: Context) -> list[dict[str, Any]]:
            conv = ctx.conversation("main", client=client)
            conv.append(user("read it"))
            streamed = ctx.llm(conv, model="tiny", tools=[READ_TOOL], on_chunk=chunks.append)
            plain = ctx.llm_call([user("read it")], model="tiny", client=client, tools=[READ_TOOL])
            return [streamed.message, plain.message, conv.messages[-1]]

        streamed, plain, stored = app.run(ask, task_id="a")
    assert streamed == plain == stored
    assert streamed["tool_calls"][0]["function"]["name"] == "read_document"
    assert json.loads(streamed["tool_calls"][0]["function"]["arguments"]) == {
        "name": "doc-01 and more"
    }
    assert chunks == ["Let", " me", " look."]


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_async_clients_stream_into_an_async_callback(app: Cairn, api: str) -> None:
    """With an async SDK client, ctx.llm returns an awaitable; an async on_chunk
    is awaited for each chunk in order, the reply is recorded with its usage and
    cost, and a replay hands over the recorded text as one awaited chunk."""
    runs: list[list[str]] = []
    fail = [True]
    with model_server(Scripted([TEXT])) as server:
        client = client_for(server, api, is_async=True)

        @app.task(name="ask", retry=Retry(attempts=2, initial_delay=0.0, jitter=0.0))
        async def ask(ctx: Context) -> dict[str, Any]:
            chunks: list[str] = []
            runs.append(chunks)

            async def on_chunk(text: str) -> None:
                await asyncio.sleep(0)  # real-sleep-ok: yields to the loop once, waits no time
                chunks.append(text)

            conv = ctx.conversation("main", client=client, prices=PRICES)
            conv.append(user("How is the ledger?"))
            reply = await ctx.llm(conv, model="tiny", on_chunk=on_chunk)
            if fail[0]:
                fail[0] = False
                raise RuntimeError("fail after the call, so the retry replays it")
            return {"content": reply.content, "usage": reply.usage.to_dict(), "cost": reply.cost}

        result = app.run(ask, task_id="a")
        assert server.requests == 1
    assert runs == [WORDS, [TEXT]]
    assert result["content"] == TEXT
    assert not result["usage"]["estimated"]
    assert result["cost"] == pytest.approx(expected_cost(result["usage"]))


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_a_stream_cut_off_mid_way_is_retried_like_a_transient_error(
    app: Cairn, api: str, is_async: bool
) -> None:
    """The server closes the connection after a few events, the reply unfinished:
    the call's entry records a Transient error and the step's policy sends the
    request again; the second stream completes. on_chunk saw the partial text and
    then the whole text from its start; only the whole reply is recorded."""
    chunks: list[str] = []
    with model_server(Scripted([TEXT])) as server:
        server.drop_next(1, after=4)
        client = client_for(server, api, is_async=is_async)

        def call(ctx: Context) -> Any:
            conv = ctx.conversation("main", client=client)
            conv.append(user("How is the ledger?"))
            return ctx.llm(conv, model="tiny", on_chunk=chunks.append, retry=QUICK)

        if is_async:

            @app.task(name="ask")
            async def ask_async(ctx: Context) -> Any:
                return (await call(ctx)).content

            task: Any = ask_async
        else:

            @app.task(name="ask")
            def ask(ctx: Context) -> Any:
                return call(ctx).content

            task = ask
        result = app.run(task, task_id="a")
        assert (server.requests, server.streams) == (2, 2)
    cut = len(chunks) - len(WORDS)
    assert 0 < cut < len(WORDS)
    assert chunks == WORDS[:cut] + WORDS
    assert result == TEXT
    (entry,) = history(app, "a")
    assert entry.status == "completed"
    assert entry.attempts == 2
    (row,) = [r for r in app.store.load_messages("a", "main", 0, 10) if r.role == "assistant"]
    assert json.loads(row.content)["content"] == TEXT


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("how", ["end", "error"])
def test_a_stream_that_ends_early_or_with_an_error_event_is_retried(
    app: Cairn, api: str, how: str
) -> None:
    """A stream whose body ends cleanly without its last events (no finish
    reason, no message_stop), or that breaks off with an error event (the
    API's overloaded error): each is a Transient error, so the call is sent
    again, and with the policy spent the task fails with it, the partial text
    never recorded."""
    with model_server(Scripted([TEXT])) as server:
        server.drop_next(1, after=4, how=how)
        client = client_for(server, api)

        @app.task(name="ask", retry=NO_RETRY)
        def ask(ctx: Context) -> Any:
            conv = ctx.conversation("main", client=client)
            conv.append(user("How is the ledger?"))
            return ctx.llm(conv, model="tiny", stream=True, retry=QUICK).content

        assert app.run(ask, task_id="a") == TEXT
        assert server.requests == 2
        server.drop_next(1, after=4, how=how)

        @app.task(name="once", retry=NO_RETRY)
        def once(ctx: Context) -> Any:
            reply = ctx.llm_call(
                [user("hi")], model="tiny", client=client, stream=True, retry=NO_RETRY
            )
            return reply.content

        with pytest.raises(TaskFailed) as failed:
            app.run(once, task_id="b")
        assert server.requests == 3
    assert failed.value.error["type"].endswith("Transient")
    assert "streamed" in failed.value.error["message"]


# Events of TEXT's stream: OpenAI's role chunk, a chunk a word, the finish
# chunk, the usage chunk and [DONE]; Anthropic's message_start, the text
# block's start, a delta a word, its stop, message_delta and message_stop.
EVENTS = {"openai": len(WORDS) + 4, "anthropic": len(WORDS) + 5}


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_a_stream_cut_after_its_reply_and_usage_is_not_sent_again(
    app: Cairn, api: str, is_async: bool
) -> None:
    """The connection drops after the reply, its finish and its usage have all
    arrived, before the stream's very last event (OpenAI's ``[DONE]``,
    Anthropic's ``message_stop``): nothing of the reply is missing, so the
    call is recorded as it is, with the usage the server counted, and the
    request is not sent again (it was, and paid twice, before)."""
    with model_server(Scripted([TEXT])) as server:
        server.drop_next(1, after=EVENTS[api] - 1)
        client = client_for(server, api, is_async=is_async)

        def call(ctx: Context) -> Any:
            return ctx.llm_call(
                [user("hi")], model="tiny", client=client, stream=True, retry=QUICK, prices=PRICES
            )

        if is_async:

            @app.task(name="ask")
            async def ask_async(ctx: Context) -> Any:
                reply = await call(ctx)
                return [reply.content, reply.usage.to_dict()]

            task: Any = ask_async
        else:

            @app.task(name="ask")
            def ask(ctx: Context) -> Any:
                reply = call(ctx)
                return [reply.content, reply.usage.to_dict()]

            task = ask
        content, usage = app.run(task, task_id="a")
        assert server.requests == 1
        counted = (server.prompt_tokens, server.completion_tokens)
    assert content == TEXT
    assert not usage["estimated"]
    assert (usage["input_tokens"], usage["output_tokens"]) == counted


def test_an_openai_stream_cut_after_its_finish_keeps_the_reply_with_estimated_usage(
    app: Cairn,
) -> None:
    """The connection drops right after the finish chunk, before the usage
    chunk: the reply is whole, so it is recorded (usage estimated, and marked
    so) rather than bought again, as when the body ends cleanly there."""
    with model_server(Scripted([TEXT])) as server:
        server.drop_next(1, after=EVENTS["openai"] - 2)
        client = client_for(server, "openai")

        @app.task(name="ask")
        def ask(ctx: Context) -> Any:
            reply = ctx.llm_call(
                [user("hi")], model="tiny", client=client, stream=True, retry=QUICK
            )
            return [reply.content, reply.usage.to_dict()]

        content, usage = app.run(ask, task_id="a")
        assert server.requests == 1
    assert content == TEXT
    assert usage["estimated"]


def test_a_stream_cut_off_every_time_fails_after_the_policy_s_attempts(app: Cairn) -> None:
    """Every stream is cut off: the call is sent as many times as the policy's
    attempts, then the task fails with the Transient error, which says the
    reply was being streamed; nothing of the partial text is recorded."""
    with model_server(Scripted([TEXT])) as server:
        server.drop_next(3, after=3)
        client = client_for(server, "openai")

        @app.task(name="ask", retry=NO_RETRY)
        def ask(ctx: Context) -> Any:
            conv = ctx.conversation("main", client=client)
            conv.append(user("How is the ledger?"))
            return ctx.llm(conv, model="tiny", stream=True, retry=QUICK).content

        with pytest.raises(TaskFailed) as failed:
            app.run(ask, task_id="a")
        assert server.requests == 3
    assert failed.value.error["type"].endswith("Transient")
    assert "streamed" in failed.value.error["message"]
    assert [r.role for r in app.store.load_messages("a", "main", 0, 10)] == ["user"]


def test_an_error_in_on_chunk_fails_the_call_without_sending_it_again(app: Cairn) -> None:
    """on_chunk raises on the third chunk: the call fails as Permanent (sending
    the request again would not fix the callback) although the policy would
    retry, and the server saw one request."""

    def on_chunk(text: str) -> None:
        if text == " balances:":
            raise ValueError("the display broke")

    with model_server(Scripted([TEXT])) as server:
        client = client_for(server, "openai")

        @app.task(name="ask", retry=NO_RETRY)
        def ask(ctx: Context) -> Any:
            return ctx.llm_call(
                [user("hi")], model="tiny", client=client, on_chunk=on_chunk, retry=QUICK
            ).content

        with pytest.raises(TaskFailed) as failed:
            app.run(ask, task_id="a")
        assert server.requests == 1
    assert failed.value.error["type"].endswith("Permanent")
    assert "on_chunk raised ValueError: the display broke" in failed.value.error["message"]


def test_a_reply_stored_before_its_entry_is_replayed_as_one_chunk(
    app: Cairn, db_path: Any, clock: FakeClock
) -> None:
    """A crash after the streamed reply's row was committed but before its entry:
    the resumed task takes the stored reply, sends nothing, and hands its text
    to on_chunk as one chunk."""
    runs: list[list[str]] = []
    with model_server(Scripted([TEXT])) as server:
        client = client_for(server, "openai")

        def define(target: Cairn) -> Any:
            @target.task(name="ask")
            def ask(ctx: Context) -> Any:
                chunks: list[str] = []
                runs.append(chunks)
                conv = ctx.conversation("main", client=client)
                conv.append(user("How is the ledger?"))
                return ctx.llm(conv, model="tiny", on_chunk=chunks.append).content

            return ask

        set_fault_hook(app, crash_at("llm_returned", 1))
        with pytest.raises(Crash):
            app.run(define(app), task_id="a")
        with resume(f"sqlite:///{db_path}", clock) as other:
            result = other.run(define(other), task_id="a")
        assert server.requests == 1
    assert runs == [WORDS, [TEXT]]
    assert result == TEXT


def test_on_chunk_must_fit_the_client(app: Cairn) -> None:
    """An async on_chunk with a sync client, or an on_chunk that is not callable,
    is refused before anything is sent."""

    async def on_chunk(text: str) -> None:
        return None

    with model_server(Scripted([TEXT])) as server:
        client = client_for(server, "openai")
        bad: list[Callable[[Context], Any]] = [
            lambda ctx: ctx.llm_call([user("hi")], model="t", client=client, on_chunk=on_chunk),
            lambda ctx: ctx.llm_call([user("hi")], model="t", client=client, on_chunk="print"),
        ]
        for number, call in enumerate(bad):

            @app.task(name=f"ask{number}", retry=NO_RETRY)
            def ask(ctx: Context, call: Any = call) -> None:
                call(ctx)

            with pytest.raises(TaskFailed, match="on_chunk"):
                app.run(ask, task_id=f"a{number}")
        assert server.requests == 0


def test_without_the_usage_chunk_the_usage_is_estimated(app: Cairn) -> None:
    """An endpoint that refuses stream_options is called with include_usage
    False: the server sends no usage chunk, and the recorded usage is cairn's
    estimate, marked as one."""
    with model_server(Scripted([TEXT])) as server:
        client = client_for(server, "openai")

        @app.task(name="ask")
        def ask(ctx: Context) -> Any:
            options = {"include_usage": False}
            reply = ctx.llm_call(
                [user("hi")], model="tiny", client=client, stream=True, stream_options=options
            )
            return [reply.content, reply.usage.to_dict()]

        content, usage = app.run(ask, task_id="a")
        assert server.bodies[0]["stream_options"] == {"include_usage": False}
    assert content == TEXT
    assert usage["estimated"]
    assert usage["output_tokens"] > 0


def test_a_provider_without_stream_hands_its_reply_over_as_one_chunk(app: Cairn) -> None:
    """A Provider of one's own that has no stream method (the in-process
    simulated one) answers in one piece, and on_chunk gets it as one chunk."""
    chunks: list[str] = []
    provider = SimulatedProvider(Scripted([TEXT]))

    @app.task(name="ask")
    def ask(ctx: Context) -> Any:
        reply = ctx.llm_call([user("hi")], model="tiny", client=provider, on_chunk=chunks.append)
        return reply.content

    assert app.run(ask, task_id="a") == TEXT
    assert chunks == [TEXT]


class SplitPairServer(LocalServer):
    """An OpenAI-compatible endpoint that streams "Done 😀" with the emoji's two
    UTF-16 halves JSON-escaped in two chunks (``\\ud83d``, then ``\\ude00``), as
    a server escaping non-ASCII text and streaming token by token can, and
    counts its requests."""

    def __init__(self) -> None:
        super().__init__()
        self.requests = 0

    def answer(self, request: RequestHandler, method: str) -> None:
        request.read_body()
        self.requests += 1
        base = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "tiny"}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return json.dumps({**base, "choices": [choice]})  # ensure_ascii: "\\ud83d"

        usage = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
        events = [
            chunk({"role": "assistant", "content": "Done "}),
            chunk({"content": "\ud83d"}),
            chunk({"content": "\ude00"}),
            chunk({}, "stop"),
            json.dumps({**base, "choices": [], "usage": usage}),
            "[DONE]",
        ]
        body = "".join(f"data: {event}\n\n" for event in events).encode()
        request.send_response(200)
        request.send_header("Content-Type", "text/event-stream")
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)


def test_an_emoji_streamed_in_two_halves_is_recorded_whole(app: Cairn) -> None:
    """The two halves of an emoji's UTF-16 pair arrive in two chunks, each a
    lone surrogate once decoded: the reply is joined into the emoji itself (it
    failed the task, after the request was paid for, before), recorded from one
    request."""
    with SplitPairServer() as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0)

        @app.task(name="ask")
        def ask(ctx: Context) -> Any:
            conv = ctx.conversation("main", client=client)
            conv.append(user("How is it?"))
            return ctx.llm(conv, model="tiny", stream=True).content

        assert app.run(ask, task_id="a") == "Done \U0001f600"
        assert server.requests == 1
