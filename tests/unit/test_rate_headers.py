"""Reading a provider's rate-limit headers (``cairn.agent.rate_headers``)."""

from __future__ import annotations

from cairn.agent.rate_headers import ProviderRoom, duration_seconds, room_of


def test_openais_headers_give_what_is_left_and_the_go_durations_until_reset() -> None:
    """OpenAI's remaining counts and reset durations are read; a duration
    that is not one (or no header at all) says nothing."""
    room = room_of(
        {
            "x-ratelimit-remaining-tokens": "1200",
            "x-ratelimit-reset-tokens": "6m0s",
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-reset-requests": "120ms",
        }
    )
    assert room == ProviderRoom(1200, 360.0, 0, 0.12)
    assert duration_seconds("1h2m3.5s") == 3723.5
    assert duration_seconds("soon") is None
    assert room_of({"content-type": "application/json"}) is None
    assert room_of(None) is None


def test_anthropics_reset_times_are_read_against_the_answers_date() -> None:
    """Anthropic's resets are times: the seconds until them are counted from
    the answer's own Date header (the provider's clock), never below zero."""
    room = room_of(
        {
            "date": "Tue, 08 Dec 2026 01:00:00 GMT",
            "anthropic-ratelimit-tokens-remaining": "50",
            "anthropic-ratelimit-tokens-reset": "2026-12-08T01:00:30Z",
            "anthropic-ratelimit-requests-remaining": "7",
            "anthropic-ratelimit-requests-reset": "2026-12-08T00:59:00Z",
        }
    )
    assert room == ProviderRoom(50, 30.0, 7, 0.0)


def test_the_wait_is_until_the_reset_of_the_limit_without_room() -> None:
    """A call of 100 tokens waits for the token reset when fewer are left, for
    the request reset when no request is left (the longer of the two when both),
    and not at all when there is room or the provider did not say."""
    assert ProviderRoom(99, 30.0, 5, 2.0).wait_for(100) == 30.0
    assert ProviderRoom(100, 30.0, 5, 2.0).wait_for(100) is None
    assert ProviderRoom(500, 30.0, 0, 2.0).wait_for(100) == 2.0
    assert ProviderRoom(10, 30.0, 0, 45.0).wait_for(100) == 45.0
    assert ProviderRoom(10, None, None, None).wait_for(100) is None
