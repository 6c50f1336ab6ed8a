"""A provider's rate-limit headers: how much room it says is left, and until when.

Both providers put them on their answers, a success as well as a 429:

* OpenAI: ``x-ratelimit-remaining-tokens`` / ``x-ratelimit-remaining-requests``
  and ``x-ratelimit-reset-tokens`` / ``x-ratelimit-reset-requests``, a Go
  duration until that limit has refilled (``1s``, ``6m0s``, ``120ms``);
* Anthropic: ``anthropic-ratelimit-tokens-remaining`` /
  ``anthropic-ratelimit-requests-remaining`` and ``...-tokens-reset`` /
  ``...-requests-reset``, an RFC 3339 time; it is read against the answer's own
  ``Date`` header (the provider's clock, so a skewed local clock does not
  matter), else against this machine's.

``room_of`` reads them into a ``ProviderRoom``. The provider's limit is the
truth a ``TokenRate`` only mirrors (another app, another key's use, a lower
tier): when an answer says fewer tokens are left than the call just made
needed, or no request is left, the call's token limit is closed for every
worker sharing it until the provider's reset (``wait_for``,
``cairn.engine.meter``), as a 429's ``Retry-After`` closes it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_OPENAI = {
    "tokens": ("x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"),
    "requests": ("x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"),
}
_ANTHROPIC = {
    "tokens": ("anthropic-ratelimit-tokens-remaining", "anthropic-ratelimit-tokens-reset"),
    "requests": ("anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-reset"),
}


@dataclass(frozen=True, slots=True)
class ProviderRoom:
    """What a provider's answer said is left of its limits: tokens and requests
    remaining (None: not said), and the seconds until each refills."""

    tokens: int | None = None
    tokens_reset: float | None = None
    requests: int | None = None
    requests_reset: float | None = None

    def wait_for(self, tokens: int) -> float | None:
        """How long nobody should send a call of ``tokens`` (the size of the one
        just made): until the requests refill if none is left, until the tokens
        refill if fewer than ``tokens`` are; None if the provider has room."""
        waits = []
        if self.requests == 0 and self.requests_reset is not None:
            waits.append(self.requests_reset)
        if self.tokens is not None and self.tokens < tokens and self.tokens_reset is not None:
            waits.append(self.tokens_reset)
        longest = max(waits, default=0.0)
        return longest if longest > 0 else None

    @property
    def longest_reset(self) -> float | None:
        """The later of the two resets (a 429 without ``Retry-After`` waits it)."""
        resets = [r for r in (self.tokens_reset, self.requests_reset) if r is not None]
        return max(resets) if resets else None


def room_of(headers: Mapping[str, Any] | None) -> ProviderRoom | None:
    """The room an answer's ``headers`` say is left (OpenAI's or Anthropic's
    names, see the module doc), or None if they say nothing."""
    if headers is None:
        return None
    names, reset = _OPENAI, duration_seconds
    if _text(headers, _ANTHROPIC["tokens"][0]) or _text(headers, _ANTHROPIC["requests"][0]):
        names = _ANTHROPIC
        served = _served_at(headers)

        def reset(text: str) -> float | None:
            return _until(text, served)

    tokens, requests = (
        (_count(_text(headers, names[kind][0])), _reset_of(headers, names[kind][1], reset))
        for kind in ("tokens", "requests")
    )
    if tokens == (None, None) and requests == (None, None):
        return None
    return ProviderRoom(tokens[0], tokens[1], requests[0], requests[1])


def duration_seconds(text: str) -> float | None:
    """A Go duration (``6m0s``, ``120ms``) in seconds, or None if it is not one."""
    value = text.strip()
    parts = _DURATION.findall(value)
    if not parts or "".join(n + u for n, u in parts) != value:
        return None
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)


def _text(headers: Mapping[str, Any], name: str) -> str | None:
    value = headers.get(name)
    return value.strip() if isinstance(value, str) and value.strip() else None


def _count(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def _reset_of(headers: Mapping[str, Any], name: str, read: Any) -> float | None:
    text = _text(headers, name)
    return None if text is None else read(text)


def _served_at(headers: Mapping[str, Any]) -> datetime:
    """When the answer was made, by the provider's ``Date`` header (else now)."""
    text = _text(headers, "date")
    if text is not None:
        try:
            return parsedate_to_datetime(text).astimezone(UTC)
        except (TypeError, ValueError):
            pass
    return datetime.now(UTC)


def _until(text: str, served: datetime) -> float | None:
    """Seconds from ``served`` to the RFC 3339 time ``text`` (0 if past)."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return max(0.0, (moment - served).total_seconds())
