"""A model provider's errors as cairn's own, with anything that looks like a key removed.

The openai and anthropic SDKs raise their own classes (``RateLimitError``,
``AuthenticationError``, ``APIConnectionError``...). A step's retry policy
reads cairn's classes, so each provider call turns them into:

* ``RetryAfter`` for HTTP 429, waiting what the provider asked: its
  ``retry-after-ms`` header (which the SDKs read first), else ``Retry-After``
  (seconds or an HTTP-date), else (for a 429) the later of the provider's
  request and token resets (OpenAI's ``x-ratelimit-reset-requests`` and
  ``x-ratelimit-reset-tokens``, ``6m0s``; Anthropic's
  ``anthropic-ratelimit-requests-reset`` and ``-tokens-reset``, a time:
  ``cairn.agent.rate_headers``), else ``DEFAULT_RETRY_AFTER``; a 503 that
  names a wait is waited out the same way (a model call's token limit is
  then closed for everyone that long: ``cairn.engine.meter``);
* ``Permanent`` for 401 and 403 (a wrong or unauthorised key: retrying cannot
  fix it) and the other 4xx (the request itself is wrong);
* ``Transient`` for 5xx, 408, 409, timeouts and dropped connections;
* ``Permanent`` for any other SDK error (one raised before a request was sent).

An answer with HTTP 200 that is not a completion (a body that is not JSON, no
choices, a choice without a message, an error object in its place) is no SDK
error: the SDKs hand it over, or fail to parse it, with a bare
``AttributeError`` / ``IndexError`` / ``JSONDecodeError``. The providers check
what they were given and raise ``MalformedAnswer`` (``malformed_answer``), a
``Transient``, naming the provider, the model and what was wrong, redacted
like the rest.

The error is what gets stored (its message and traceback go into the task's
history), so its text is redacted first (``cairn.redaction``: every known
secret, the client's own key and the failing request's credential headers
among them, and anything shaped like a credential). Recording redacts it
again, so an error that never passes here is kept out too. It is raised
``from None``: the SDK's error, whose text may echo the key, is not chained,
so no traceback carries it into the store. The SDK's error stays on the new
one as ``provider_error`` for code that catches it in this process.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from cairn.agent.rate_headers import room_of
from cairn.errors import MalformedAnswer, Permanent, RetryAfter, Transient
from cairn.outside_errors import DEFAULT_RETRY_AFTER, http_status_of, retry_after_seconds
from cairn.redaction import REDACTED, header_secrets, redact, secrets_of

__all__ = [
    "REDACTED",
    "behind_framework",
    "client_secrets",
    "excerpt",
    "is_sdk_error",
    "malformed_answer",
    "provider_error",
    "redact",
    "request_secrets",
]

_SDKS = ("openai", "anthropic")
# Statuses worth calling again for: a timeout, a conflict, a throttle, the server's fault.
_TRANSIENT = frozenset({408, 409, 429})
_THROTTLED = 429
# How much of a malformed answer its error quotes.
_EXCERPT = 200


def client_secrets(client: Any) -> tuple[str, ...]:
    """The credentials an SDK client was configured with: its key and its
    credential headers (never stored: only used to cut them out of text)."""
    return secrets_of(client)


def request_secrets(error: BaseException) -> tuple[str, ...]:
    """The credentials the failed request still carries, where the SDK's error
    keeps its request: the values of its credential headers (and a ``Bearer``
    value's token alone). Newer SDKs strip them from the error's copy, so this
    is a complement to the client's own, never the only source."""
    headers = getattr(getattr(error, "request", None), "headers", None)
    return tuple(header_secrets(headers))


def is_sdk_error(error: BaseException) -> bool:
    """True for an error raised by the openai or anthropic SDK."""
    return type(error).__module__.split(".", 1)[0] in _SDKS


def _header_seconds(error: BaseException) -> float | None:
    headers = getattr(getattr(error, "response", None), "headers", None)
    if headers is None:
        return None
    millis = headers.get("retry-after-ms")
    if isinstance(millis, str):
        try:
            value = float(millis)
        except ValueError:
            value = float("nan")
        if value == value and value >= 0:  # not NaN, not negative
            return value / 1000.0
    seconds = headers.get("retry-after")
    return retry_after_seconds(seconds if isinstance(seconds, str) else None)


def _reset_seconds(error: BaseException) -> float | None:
    """The wait the provider's rate-limit headers name (``cairn.agent.rate_headers``:
    the later of its token and request resets), for a 429 only: they come on
    every answer, and a 503's are no throttle."""
    headers = getattr(getattr(error, "response", None), "headers", None)
    room = room_of(headers)
    return None if room is None else room.longest_reset


def _retryable(status: int) -> bool:
    return status >= 500 or status in _TRANSIENT


def _connection_error(error: BaseException) -> bool:
    """The SDKs' ``APIConnectionError`` (and its ``APITimeoutError``): no answer came."""
    return any(cls.__name__ == "APIConnectionError" for cls in type(error).__mro__)


def provider_error(
    error: BaseException, secrets: Iterable[str | None] = (), *, provider: str = ""
) -> Exception:
    """cairn's error for the SDK error ``error`` (see the module doc), redacted."""
    status = http_status_of(error)
    where = f"{provider} " if provider else ""
    secrets = (*secrets, *request_secrets(error))
    text = redact(f"{where}{type(error).__name__}: {error}", secrets)
    mapped: Exception
    asked = _header_seconds(error) if status is not None else None
    if status == _THROTTLED and asked is None:
        asked = _reset_seconds(error)
    if status == _THROTTLED or (status == 503 and asked is not None):
        wait = DEFAULT_RETRY_AFTER if asked is None else asked
        mapped = RetryAfter(wait, f"{text} (HTTP {status}: retry after {wait:g}s)")
    elif _connection_error(error) or (status is not None and _retryable(status)):
        mapped = Transient(text)
    else:
        mapped = Permanent(text)
    vars(mapped)["provider_error"] = error
    return mapped


def behind_framework(error: BaseException, *, provider: str) -> Exception | None:
    """cairn's error for the SDK error an agent framework raised, or raised its
    own error from (the first openai or anthropic SDK error in ``error``'s chain
    of causes), redacted; None if there is none. Raise it ``from None``: the
    framework's error, whose text may echo the key, must not be chained."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if is_sdk_error(current):
            return provider_error(current, provider=provider)
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def excerpt(value: Any) -> str:
    """The start of a malformed answer (or a part of it) as one line of text."""
    if isinstance(value, bytes):
        text = value.decode("utf-8", "replace")
    elif isinstance(value, str):
        text = value
    elif callable(getattr(value, "model_dump_json", None)):
        text = value.model_dump_json(exclude_none=True)
    else:
        text = json.dumps(value, default=str)
    line = " ".join(text.split()) or "(empty)"
    return line if len(line) <= _EXCERPT else line[: _EXCERPT - 1] + "…"


def malformed_answer(
    provider: str, model: str, what: str, problem: str, secrets: Iterable[str | None] = ()
) -> MalformedAnswer:
    """cairn's error for an HTTP 200 answer to a request for ``model`` that is
    not ``what`` (a chat completion, a message), saying the ``problem``; redacted."""
    text = redact(
        f"{provider} answered a request for model {model!r} with HTTP 200 but not {what}: "
        f"{problem}",
        secrets,
    )
    return MalformedAnswer(text, provider=provider, model=model, problem=redact(problem, secrets))
