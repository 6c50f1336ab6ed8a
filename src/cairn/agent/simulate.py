"""A simulated model server: OpenAI- and Anthropic-compatible, on 127.0.0.1.

For running agents offline, in tests and examples. It speaks just enough of
both APIs for their official SDKs: ``POST /v1/chat/completions`` (OpenAI shape,
tool calls, usage) and ``POST /v1/messages`` (Anthropic shape). What the
"model" says is up to ``respond``: a function from the request, in the OpenAI
shape, to the assistant message::

    def respond(request: dict) -> dict:
        return {"role": "assistant", "content": "Done."}

    with SimulatedModelServer(respond) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="unused")

It counts every request, and every repeat of an identical request, so a test
can prove that a resumed agent sent nothing twice. Usage is counted with its
``counter`` (cairn's estimate by default), and summed over all requests in
``prompt_tokens`` and ``completion_tokens``. Given an exact counter
(``cairn.agent.tokens.ExactCounter``, the ``tokens`` extra), it counts a prompt
the way OpenAI's cookbook does (``openai_prompt_tokens``), with that encoding,
as the real API does. A reply longer than the request's ``max_tokens`` is cut
there, with finish reason ``length`` (``max_tokens`` on ``/v1/messages``), as a
real model's would be. Request headers are never kept. With
``report_usage=False`` it answers without usage, as some servers do (no
``usage`` in a chat completion, no usage chunk in a stream even when asked, no
``usage`` in an Anthropic message); it still counts the tokens itself.

A request with ``"stream": true`` is answered as the APIs stream, in
server-sent events over a chunked response: the reply's text one word per
event, tool call arguments a few characters per event, and the usage in the
last events (OpenAI's usage chunk when the request asks for it with
``stream_options={"include_usage": true}``; Anthropic's ``message_start`` and
``message_delta``). ``drop_next`` cuts the next streams off after a few events
(the connection closed without the stream's end, as a server that died would;
or the body ended cleanly without the stream's last events, as behind a proxy;
or an error event, as an overloaded model sends),
and ``hold_next`` stops one mid-stream until the test lets it go on, so a test
can kill its client while the reply is arriving.

Given ``tokens_per_window`` and/or ``requests_per_window``, it enforces them as
a provider enforces its TPM and RPM (``Throttle``): a request that would pass
either in the last ``window`` seconds is answered HTTP 429 with ``Retry-After``,
and every answer carries the provider's rate-limit headers, as the real APIs
send them: on ``/v1/chat/completions`` OpenAI's ``x-ratelimit-remaining-tokens``,
``x-ratelimit-reset-tokens`` (a duration, ``12.5s``) and the ``-requests``
pair; on ``/v1/messages`` Anthropic's ``anthropic-ratelimit-tokens-remaining``,
``anthropic-ratelimit-tokens-reset`` (an RFC 3339 time) and the
``-requests-`` pair. A reset is when the window holds nothing any more. Given
``clock`` (seconds, as ``time.time``), the limits and the ``Date`` header go by
it instead of the machine's time, so a test on a fake clock sees them agree.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

from cairn.agent.messages import Message, text_of
from cairn.agent.pricing import Usage
from cairn.agent.providers import Completion
from cairn.agent.tokens import (
    DEFAULT_COUNTER,
    TokenCounter,
    count_message,
    count_messages,
    is_exact,
)

Respond = Callable[[dict[str, Any]], Mapping[str, Any]]
_POLL = 0.02
# A streamed reply's text goes one word (with the spaces before it) per event.
_WORDS = re.compile(r"\s*\S+|\s+")
# ... and a tool call's arguments this many characters per event.
_ARGUMENT_PIECE = 8


def openai_prompt_tokens(messages: Sequence[Mapping[str, Any]], counter: TokenCounter) -> int:
    """A chat prompt's tokens as OpenAI's cookbook counts them for its chat models
    (``num_tokens_from_messages``): 3 per message, every string field's tokens
    (role, content, name), 1 more for a name, and 3 for the reply's priming.
    Written from the cookbook, apart from ``cairn.agent.tokens``, so that a test
    can hold cairn's counts against it. Tool calls: their text, 4 each."""
    total = 3
    for message in messages:
        total += 3
        for key, value in message.items():
            if key == "tool_calls":
                for call in value or ():
                    function = call.get("function") or {}
                    total += 4 + counter.count(str(function.get("name", "")))
                    total += counter.count(str(function.get("arguments", "")))
            elif key == "content" and isinstance(value, list):
                total += sum(counter.count(p["text"]) for p in value if "text" in p)
            elif key in ("role", "content", "name") and isinstance(value, str):
                total += counter.count(value)
                if key == "name":
                    total += 1
    return total


def echo(request: Mapping[str, Any]) -> Message:
    """The default model: repeats the last message's text."""
    messages = request.get("messages") or [{}]
    return {"role": "assistant", "content": f"echo: {text_of(messages[-1])}"}


@dataclass(frozen=True, slots=True)
class _Raw:
    """An answer sent as it is, with status 200: not necessarily a completion."""

    data: bytes
    content_type: str


@dataclass(frozen=True, slots=True)
class _Failure:
    status: int
    headers: dict[str, str]
    message: str


class Hold:
    """A stream the server stops after ``after`` events: ``reached`` is set once
    they are sent, and the stream goes on when ``release()`` is called."""

    def __init__(self, after: int) -> None:
        self.after = after
        self.reached = threading.Event()
        self._released = threading.Event()

    def release(self) -> None:
        self._released.set()

    def wait(self) -> None:
        self.reached.set()
        self._released.wait()


@dataclass(frozen=True, slots=True)
class _Stream:
    """How one streamed answer goes: its events, where it is cut off (None:
    never) and where it is held (None: nowhere)."""

    events: list[bytes]
    drop: _Drop | None
    hold: Hold | None
    headers: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class _Drop:
    after: int
    how: str
    error: bytes


class _Throttled(Exception):
    def __init__(self, seconds: int) -> None:
        super().__init__(f"retry after {seconds}s")
        self.seconds = seconds


class Throttle:
    """A provider's rate limits: at most ``tokens`` (prompt plus reply) and at
    most ``requests`` answered in any ``window`` seconds (None: no cap). A
    request that would pass either is answered HTTP 429 with ``Retry-After``
    (whole seconds until enough has aged out) and counts nothing. It keeps when
    (``time.monotonic``) each answered request came and its tokens, so a test
    reads the most any window really held (``busiest``) and ``refused``."""

    def __init__(
        self,
        tokens: int | None,
        requests: int | None,
        window: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tokens = tokens
        self.requests = requests
        self.window = window
        self.clock = clock
        self.answered: list[tuple[float, int]] = []
        self.refused = 0
        self.refused_after_first: int = 0

    def admit(self, tokens: int) -> None:
        """Count a request of ``tokens`` now, or raise ``_Throttled``."""
        if self.tokens is None and self.requests is None:
            self.answered.append((self.clock(), tokens))
            return
        now = self.clock()
        recent = [(at, n) for at, n in self.answered if at > now - self.window]
        over_tokens = self.tokens is not None and sum(n for _, n in recent) + tokens > self.tokens
        over_requests = self.requests is not None and len(recent) + 1 > self.requests
        if over_tokens or over_requests:
            self.refused += 1
            if self.answered:
                self.refused_after_first += 1
            oldest = recent[0][0] if recent else now
            raise _Throttled(max(1, math.ceil(oldest + self.window - now)))
        self.answered.append((now, tokens))

    def room(self) -> tuple[int | None, int | None, float]:
        """What is left now of the tokens and the requests (None: no cap), and
        the seconds until the window holds nothing (the limits' reset)."""
        now = self.clock()
        recent = [(at, n) for at, n in self.answered if at > now - self.window]
        reset = recent[-1][0] + self.window - now if recent else 0.0
        tokens = None if self.tokens is None else max(0, self.tokens - sum(n for _, n in recent))
        requests = None if self.requests is None else max(0, self.requests - len(recent))
        return tokens, requests, reset

    def busiest(self) -> tuple[int, int]:
        """The most tokens, and the most requests, answered in any one window."""
        times = self.answered
        most_tokens = most_requests = 0
        start = 0
        total = 0
        for end, (at, n) in enumerate(times):
            total += n
            while times[start][0] <= at - self.window:
                total -= times[start][1]
                start += 1
            most_tokens = max(most_tokens, total)
            most_requests = max(most_requests, end - start + 1)
        return most_tokens, most_requests


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    server: _Server

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        owner = self.server.owner
        status, body, headers = owner.answer(self.path, raw)
        if isinstance(body, _Raw):
            self._send(HTTPStatus.OK, body.data, {"Content-Type": body.content_type})
            return
        stream = owner.streamed(self.path, raw, status, body, headers)
        if stream is not None:
            self._stream(stream)
            return
        self._send(
            status, json.dumps(body).encode(), {**headers, "Content-Type": "application/json"}
        )

    def date_time_string(self, timestamp: float | None = None) -> str:
        """The ``Date`` header, by the server's clock."""
        return super().date_time_string(
            self.server.owner.wall() if timestamp is None else timestamp
        )

    def _send(self, status: int, data: bytes, headers: Mapping[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, stream: _Stream) -> None:
        """Server-sent events in a chunked body (so a cut shows: no last chunk)."""
        self.protocol_version = "HTTP/1.1"
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        for name, value in stream.headers.items():
            self.send_header(name, value)
        self.end_headers()
        for number, event in enumerate(stream.events):
            drop = stream.drop
            if drop is not None and number == drop.after:
                self.close_connection = True
                if drop.how == "error":
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(drop.error), drop.error))
                if drop.how in ("end", "error"):
                    self.wfile.write(b"0\r\n\r\n")
                return  # "cut": the socket closes with the body unfinished
            if stream.hold is not None and number == stream.hold.after:
                stream.hold.wait()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
        """Quiet."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, owner: SimulatedModelServer) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.owner = owner

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a killed client
            super().handle_error(request, client_address)


class SimulatedModelServer:
    """A model endpoint on a free local port; use it as a context manager."""

    def __init__(
        self,
        respond: Respond = echo,
        *,
        cached_tokens: int = 0,
        counter: TokenCounter | None = None,
        report_usage: bool = True,
        tokens_per_window: int | None = None,
        requests_per_window: int | None = None,
        window: float = 60.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.respond = respond
        # The time its limits and its Date header go by (see the module doc).
        self.wall: Callable[[], float] = clock or time.time
        # A provider's TPM and RPM: see ``Throttle``.
        self.throttle = Throttle(
            tokens_per_window, requests_per_window, window, clock or time.monotonic
        )
        self.cached_tokens = cached_tokens
        self.report_usage = report_usage
        # How this "model" counts tokens; another counter than the client's makes
        # the provider's counts and cairn's estimates differ, as a real one's do.
        self.counter = counter or DEFAULT_COUNTER
        self._lock = threading.Lock()
        self._bodies: list[dict[str, Any]] = []
        self._fingerprints: Counter[str] = Counter()
        self._failures: list[_Failure] = []
        self._raws: list[_Raw] = []
        self._drops: list[tuple[int, str]] = []
        self._holds: list[Hold] = []
        self._held: list[Hold] = []
        self._streams = 0
        self._ids = itertools.count(1)
        # The server's own token accounting, summed over every answered request.
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- where to point clients ------------------------------------------------------
    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the server is not started; use it as a context manager")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def base_url(self) -> str:
        """For ``openai.OpenAI(base_url=...)``."""
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """For ``anthropic.Anthropic(base_url=...)``."""
        return self.url

    # -- what tests read ---------------------------------------------------------------
    @property
    def requests(self) -> int:
        """Requests answered so far (errors included)."""
        with self._lock:
            return len(self._bodies)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        """Every request body received, in order."""
        with self._lock:
            return list(self._bodies)

    @property
    def streams(self) -> int:
        """Requests answered as a stream (cut off or not)."""
        with self._lock:
            return self._streams

    @property
    def repeats(self) -> int:
        """Requests that were identical to an earlier one."""
        with self._lock:
            return sum(n - 1 for n in self._fingerprints.values())

    def fail_next(
        self,
        count: int,
        status: int = HTTPStatus.INTERNAL_SERVER_ERROR,
        *,
        headers: Mapping[str, str] | None = None,
        message: str = "simulated failure",
    ) -> None:
        """Answer the next ``count`` requests with ``status``, these response
        ``headers`` (``{"Retry-After": "3"}``) and this error ``message``."""
        failure = _Failure(int(status), dict(headers or {}), message)
        with self._lock:
            self._failures += [failure] * count

    def answer_next(
        self, count: int, body: bytes | str | Any, *, content_type: str = "application/json"
    ) -> None:
        """Answer the next ``count`` requests with status 200 and ``body`` as it
        is (bytes or text as given, anything else as JSON), never streamed: what
        a proxy in the way may send (an HTML page, a cut body, a completion
        without choices) in place of the model's answer."""
        if isinstance(body, str):
            data = body.encode()
        elif isinstance(body, bytes):
            data = body
        else:
            data = json.dumps(body).encode()
        with self._lock:
            self._raws += [_Raw(data, content_type)] * count

    def drop_next(self, count: int, *, after: int = 2, how: str = "cut") -> None:
        """Cut the next ``count`` streamed answers off after their first ``after``
        events: ``how="cut"`` closes the connection with the body unfinished,
        ``"end"`` ends the body cleanly without the stream's last events, and
        ``"error"`` sends an error event (the API's overloaded error) and ends."""
        if how not in ("cut", "end", "error"):
            raise ValueError(f"how must be 'cut', 'end' or 'error', not {how!r}")
        with self._lock:
            self._drops += [(after, how)] * count

    def hold_next(self, *, after: int = 2) -> Hold:
        """Stop the next streamed answer after ``after`` events until the returned
        ``Hold`` is released (its ``reached`` event says when it stopped)."""
        hold = Hold(after)
        with self._lock:
            self._holds.append(hold)
            self._held.append(hold)
        return hold

    # -- running -------------------------------------------------------------------------
    def start(self) -> Self:
        self._httpd = _Server(self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": _POLL}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._lock:
            for hold in self._held:
                hold.release()  # no handler thread waits past the server
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- answering -------------------------------------------------------------------------
    def answer(self, path: str, raw: bytes) -> tuple[int, dict[str, Any] | _Raw, dict[str, str]]:
        """The status, body and extra headers of the answer to one request."""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return HTTPStatus.BAD_REQUEST, {"error": {"message": "bad JSON"}}, {}
        with self._lock:
            self._bodies.append(body)
            self._fingerprints[hashlib.sha256(raw).hexdigest()] += 1
            failure = self._failures.pop(0) if self._failures else None
            planned = self._raws.pop(0) if failure is None and self._raws else None
        if failure is not None:
            error = {"message": failure.message, "type": "server_error"}
            return failure.status, {"error": error}, failure.headers
        if planned is not None:
            return HTTPStatus.OK, planned, {}
        try:
            if path.rstrip("/").endswith("/chat/completions"):
                return HTTPStatus.OK, self._openai(body), self._room_headers(openai=True)
            if path.rstrip("/").endswith("/messages"):
                return HTTPStatus.OK, self._anthropic(body), self._room_headers(openai=False)
        except _Throttled as refused:
            error = {"message": "rate limit reached", "type": "rate_limit_error"}
            headers = {"Retry-After": str(refused.seconds)}
            return HTTPStatus.TOO_MANY_REQUESTS, {"error": error}, headers
        return HTTPStatus.NOT_FOUND, {"error": {"message": f"no route {path}"}}, {}

    def _room_headers(self, *, openai: bool) -> dict[str, str]:
        """The rate-limit headers of an answer (none without a limit), in the
        API's names (see the module doc)."""
        throttle = self.throttle
        if throttle.tokens is None and throttle.requests is None:
            return {}
        with self._lock:
            tokens, requests, reset = throttle.room()
        if openai:
            names, when = ("x-ratelimit-remaining-", "x-ratelimit-reset-"), f"{reset:.3f}s"
            pairs = {"tokens": tokens, "requests": requests}
            return {
                header: value
                for kind, left in pairs.items()
                if left is not None
                for header, value in ((names[0] + kind, str(left)), (names[1] + kind, when))
            }
        # A whole second, as late as the reset or later: the Date header has no fraction.
        at = datetime.fromtimestamp(math.ceil(self.wall() + reset), UTC)
        pairs = {"tokens": tokens, "requests": requests}
        return {
            header: value
            for kind, left in pairs.items()
            if left is not None
            for header, value in (
                (f"anthropic-ratelimit-{kind}-remaining", str(left)),
                (f"anthropic-ratelimit-{kind}-reset", at.strftime("%Y-%m-%dT%H:%M:%SZ")),
            )
        }

    def streamed(
        self,
        path: str,
        raw: bytes,
        status: int,
        answer: dict[str, Any],
        headers: Mapping[str, str] | None = None,
    ) -> _Stream | None:
        """The stream that carries ``answer``, if the request asked for one and
        the answer is not an error."""
        if status != HTTPStatus.OK:
            return None
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return None
        if not isinstance(body, dict) or body.get("stream") is not True:
            return None
        if path.rstrip("/").endswith("/chat/completions"):
            options = body.get("stream_options") or {}
            asked = bool(options.get("include_usage")) and "usage" in answer
            events = openai_events(answer, include_usage=asked)
        else:
            events = anthropic_events(answer)
        with self._lock:
            self._streams += 1
            planned = self._drops.pop(0) if self._drops else None
            hold = self._holds.pop(0) if self._holds else None
        drop = None
        if planned is not None:
            openai = path.rstrip("/").endswith("/chat/completions")
            drop = _Drop(*planned, _error_event(openai))
        return _Stream(events, drop, hold, dict(headers or {}))

    def _reply(self, request: dict[str, Any]) -> tuple[Message, int, int, bool]:
        """The reply, the prompt's and the reply's tokens, and whether the reply
        was cut off at the request's ``max_tokens`` (as a real model stops there)."""
        reply = dict(self.respond(request))
        counter = self.counter
        messages = request.get("messages") or []
        if is_exact(counter):
            prompt = openai_prompt_tokens(messages, counter)
        else:
            prompt = count_messages(messages, counter)
        prompt += sum(len(json.dumps(t)) // 4 for t in request.get("tools") or [])
        cap = request.get("max_tokens") or request.get("max_completion_tokens")
        size = count_message(reply, counter)
        cut = isinstance(cap, int) and size > cap and not reply.get("tool_calls")
        if cut and isinstance(cap, int):
            reply["content"] = _cut(str(reply.get("content") or ""), cap, counter)
            size = count_message(reply, counter)
        with self._lock:
            self.throttle.admit(prompt + size)
            self.prompt_tokens += prompt
            self.completion_tokens += size
        return reply, prompt, size, cut

    def _openai(self, body: dict[str, Any]) -> dict[str, Any]:
        reply, prompt, completion, cut = self._reply(body)
        calls = reply.get("tool_calls") or None
        finish = "length" if cut else ("tool_calls" if calls else "stop")
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": min(self.cached_tokens, prompt)},
        }
        answer = {
            "id": f"chatcmpl-{next(self._ids)}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "simulated"),
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": reply.get("content"),
                        "tool_calls": calls,
                    },
                    "finish_reason": finish,
                    "logprobs": None,
                }
            ],
        }
        return {**answer, "usage": usage} if self.report_usage else answer

    def _anthropic(self, body: dict[str, Any]) -> dict[str, Any]:
        request = {**body, "messages": from_anthropic_request(body)}
        reply, prompt, completion, cut = self._reply(request)
        content: list[dict[str, Any]] = []
        if reply.get("content"):
            content.append({"type": "text", "text": reply["content"]})
        for call in reply.get("tool_calls") or ():
            function = call["function"]
            content.append(
                {
                    "type": "tool_use",
                    "id": call["id"],
                    "name": function["name"],
                    "input": json.loads(function.get("arguments") or "{}"),
                }
            )
        cached = min(self.cached_tokens, prompt)
        usage = {
            "input_tokens": prompt - cached,
            "output_tokens": completion,
            "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": 0,
        }
        answer = {
            "id": f"msg_{next(self._ids)}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "simulated"),
            "content": content,
            "stop_reason": _stop_reason(reply, cut),
            "stop_sequence": None,
        }
        return {**answer, "usage": usage} if self.report_usage else answer


def _error_event(openai: bool) -> bytes:
    """The event an overloaded model breaks a stream off with, in each API's shape."""
    if openai:
        return _sse({"error": {"message": "simulated overload", "type": "server_error"}})
    error = {"type": "overloaded_error", "message": "simulated overload"}
    return _sse({"type": "error", "error": error}, "error")


def _words(text: str) -> list[str]:
    return _WORDS.findall(text)


def _pieces(text: str) -> list[str]:
    return [text[i : i + _ARGUMENT_PIECE] for i in range(0, len(text), _ARGUMENT_PIECE)] or [""]


def _sse(data: Mapping[str, Any] | str, event: str | None = None) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


def openai_events(answer: Mapping[str, Any], *, include_usage: bool) -> list[bytes]:
    """A chat completion (as ``/v1/chat/completions`` answers it) as the events
    of its stream: the role, the text a word at a time, each tool call's name
    and then its arguments in pieces, the finish reason, the usage if asked,
    ``[DONE]``."""
    choice = answer["choices"][0]
    message = choice["message"]
    base = {
        "id": answer["id"],
        "object": "chat.completion.chunk",
        "created": answer["created"],
        "model": answer["model"],
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        part = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return {**base, "choices": [part], **({"usage": None} if include_usage else {})}

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": word}) for word in _words(message.get("content") or "")]
    for index, call in enumerate(message.get("tool_calls") or ()):
        function = call["function"]
        head = {"index": index, "id": call["id"], "type": "function"}
        head["function"] = {"name": function["name"], "arguments": ""}
        chunks.append(chunk({"tool_calls": [head]}))
        for piece in _pieces(function.get("arguments") or ""):
            part = {"index": index, "function": {"arguments": piece}}
            chunks.append(chunk({"tool_calls": [part]}))
    chunks.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        chunks.append({**base, "choices": [], "usage": answer["usage"]})
    return [*(_sse(c) for c in chunks), _sse("[DONE]")]


def anthropic_events(answer: Mapping[str, Any]) -> list[bytes]:
    """A message (as ``/v1/messages`` answers it) as the events of its stream:
    ``message_start`` with the input usage, each block started, filled in
    pieces and stopped, ``message_delta`` with the stop reason and the output
    tokens, ``message_stop``."""
    usage = answer.get("usage")
    start = {**answer, "content": [], "stop_reason": None, "stop_sequence": None}
    if usage is not None:
        start["usage"] = {**usage, "output_tokens": 1}
    events = [_sse({"type": "message_start", "message": start}, "message_start")]
    for index, block in enumerate(answer["content"]):
        if block["type"] == "text":
            opened: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": w} for w in _words(block["text"])]
        else:
            opened = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            text = json.dumps(block["input"])
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in _pieces(text)]
        head = {"type": "content_block_start", "index": index, "content_block": opened}
        events.append(_sse(head, "content_block_start"))
        for piece in deltas:
            part = {"type": "content_block_delta", "index": index, "delta": piece}
            events.append(_sse(part, "content_block_delta"))
        events.append(_sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
    delta: dict[str, Any] = {"stop_reason": answer["stop_reason"], "stop_sequence": None}
    ending: dict[str, Any] = {"type": "message_delta", "delta": delta}
    if usage is not None:
        ending["usage"] = {"output_tokens": usage["output_tokens"]}
    events.append(_sse(ending, "message_delta"))
    events.append(_sse({"type": "message_stop"}, "message_stop"))
    return events


def _cut(text: str, cap: int, counter: TokenCounter) -> str:
    """``text`` cut until its message counts at most ``cap`` tokens."""
    while text and count_message({"role": "assistant", "content": text}, counter) > cap:
        text = text[: len(text) * 9 // 10]
    return text


def _stop_reason(reply: Mapping[str, Any], cut: bool) -> str:
    if cut:
        return "max_tokens"
    return "tool_use" if reply.get("tool_calls") else "end_turn"


def from_anthropic_request(body: Mapping[str, Any]) -> list[Message]:
    """An Anthropic request's system and messages in the OpenAI chat shape."""
    messages: list[Message] = []
    if body.get("system"):
        messages.append({"role": "system", "content": str(body["system"])})
    for turn in body.get("messages") or ():
        content = turn["content"]
        if isinstance(content, str):
            messages.append({"role": turn["role"], "content": content})
            continue
        texts = [b["text"] for b in content if b.get("type") == "text"]
        uses = [b for b in content if b.get("type") == "tool_use"]
        for block in (b for b in content if b.get("type") == "tool_result"):
            messages.append(
                {"role": "tool", "tool_call_id": block["tool_use_id"], "content": block["content"]}
            )
        if texts or uses:
            message: Message = {"role": turn["role"], "content": "".join(texts) or None}
            if uses:
                message["tool_calls"] = [
                    {
                        "id": u["id"],
                        "type": "function",
                        "function": {"name": u["name"], "arguments": json.dumps(u["input"])},
                    }
                    for u in uses
                ]
            messages.append(message)
    return messages


class SimulatedProvider:
    """The same simulated model without HTTP: a ``Provider`` that answers in this
    process (for crash tests that fork a process per case)."""

    name = "simulated"
    is_async = False

    def __init__(self, respond: Respond = echo) -> None:
        self.respond = respond

    def complete(
        self,
        messages: Sequence[Message],
        *,
        model: str,
        tools: Sequence[Mapping[str, Any]] | None,
        params: Mapping[str, Any],
    ) -> Completion:
        request = {"model": model, "messages": list(messages), "tools": list(tools or [])}
        reply = dict(self.respond(request))
        usage = Usage(count_messages(messages), count_message(reply))
        return Completion(reply, usage, model, "tool_calls" if reply.get("tool_calls") else "stop")
