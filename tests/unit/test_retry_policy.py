"""Retry policies: delays, validation, and which errors may be retried."""

from __future__ import annotations

import random

import pytest

from cairn import CodecError, LeaseLost, NonDeterminismError, Permanent, Retry
from cairn.retry import NO_RETRY, is_permanent


def test_delay_doubles_from_the_initial_delay() -> None:
    """Without jitter, the wait after attempt n is initial_delay * backoff ** (n - 1)."""
    policy = Retry(attempts=6, initial_delay=1, backoff=2, max_delay=100, jitter=0)
    assert [policy.delay(n) for n in range(1, 6)] == [1.0, 2.0, 4.0, 8.0, 16.0]


def test_delay_follows_the_backoff_factor() -> None:
    """backoff=1 keeps the delay constant; backoff=3 triples it each time."""
    constant = Retry(initial_delay=0.5, backoff=1, jitter=0)
    tripling = Retry(initial_delay=0.5, backoff=3, jitter=0)
    assert [constant.delay(n) for n in (1, 2, 3)] == [0.5, 0.5, 0.5]
    assert [tripling.delay(n) for n in (1, 2, 3)] == [0.5, 1.5, 4.5]


def test_delay_never_grows_past_max_delay() -> None:
    """The delay is capped at max_delay, however many attempts failed."""
    policy = Retry(initial_delay=1, backoff=2, max_delay=5, jitter=0)
    assert [policy.delay(n) for n in (3, 4, 10, 60)] == [4.0, 5.0, 5.0, 5.0]


def test_delay_stays_capped_after_very_many_attempts() -> None:
    """A long-lived policy (thousands of attempts) keeps answering max_delay: the
    exponential growth must not overflow once the cap is reached."""
    policy = Retry(attempts=10_000, initial_delay=1, backoff=2, max_delay=60, jitter=0.1)
    assert policy.delay(1100, rng=random.Random(3)) <= 60.0
    assert Retry(attempts=10_000, max_delay=60, jitter=0).delay(5000) == 60.0


def test_zero_initial_delay_retries_at_once() -> None:
    """initial_delay=0 means no wait at all, with or without jitter."""
    assert Retry(initial_delay=0, jitter=0.5).delay(4, rng=random.Random(1)) == 0.0


def test_jitter_adds_at_most_its_fraction_of_the_delay() -> None:
    """With jitter j, each delay lies in [base, base * (1 + j)] and varies between calls."""
    policy = Retry(initial_delay=2, backoff=2, max_delay=1000, jitter=0.25)
    rng = random.Random(1234)
    for attempt in (1, 2, 3):
        base = 2.0 * 2 ** (attempt - 1)
        samples = [policy.delay(attempt, rng=rng) for _ in range(200)]
        assert all(base <= s <= base * 1.25 for s in samples)
        assert len(set(samples)) > 100


def test_jitter_is_reproducible_with_a_seeded_rng() -> None:
    """The same seed gives the same delays."""
    policy = Retry(initial_delay=1, jitter=1)
    first = [policy.delay(n, rng=random.Random(7)) for n in (1, 2, 3)]
    again = [policy.delay(n, rng=random.Random(7)) for n in (1, 2, 3)]
    assert first == again


def test_jitter_never_pushes_the_delay_past_max_delay() -> None:
    """Jitter on a capped delay still stays within max_delay."""
    policy = Retry(initial_delay=10, max_delay=10, jitter=1)
    rng = random.Random(99)
    assert all(policy.delay(5, rng=rng) <= 10 for _ in range(100))


@pytest.mark.parametrize(
    ("kwargs", "mentions"),
    [
        ({"attempts": 0}, "attempts"),
        ({"attempts": -3}, "attempts"),
        ({"initial_delay": -1}, "delay"),
        ({"max_delay": -0.5}, "delay"),
        ({"backoff": 0.5}, "backoff"),
        ({"jitter": -0.1}, "jitter"),
        ({"jitter": 1.5}, "jitter"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, float], mentions: str) -> None:
    """A policy that makes no sense raises ValueError naming the bad argument."""
    with pytest.raises(ValueError, match=mentions):
        Retry(**kwargs)  # type: ignore[arg-type]


def test_arguments_are_keyword_only() -> None:
    """Retry takes its arguments by name only, so a call reads unambiguously."""
    with pytest.raises(TypeError):
        Retry(3)  # type: ignore[call-arg]


def test_should_retry_until_the_attempts_are_spent() -> None:
    """An ordinary error may be retried while attempts remain, and not after."""
    policy = Retry(attempts=3)
    error = ConnectionError("reset")
    assert [policy.should_retry(error, n) for n in (1, 2, 3, 4)] == [True, True, False, False]
    assert not NO_RETRY.should_retry(error, 1)


def test_retry_on_and_give_up_on_filter_errors() -> None:
    """retry_on admits errors to retrying; give_up_on vetoes them; the veto wins."""
    policy = Retry(
        attempts=5,
        retry_on=lambda e: isinstance(e, OSError),
        give_up_on=lambda e: isinstance(e, PermissionError),
    )
    assert policy.should_retry(TimeoutError(), 1)
    assert not policy.should_retry(ValueError(), 1)
    assert not policy.should_retry(PermissionError(), 1)


@pytest.mark.parametrize(
    "error",
    [
        Permanent("no"),
        NonDeterminismError(task_id="t", seq=1, recorded="step a", current="step b"),
        CodecError("cannot encode"),
        LeaseLost("t"),
    ],
)
def test_errors_that_retrying_cannot_fix_are_never_retried(error: BaseException) -> None:
    """Permanent, non-determinism, codec errors and cairn's control flow are permanent:
    no policy retries them, even one that would accept every error."""
    assert is_permanent(error)
    assert not Retry(attempts=10, retry_on=lambda e: True).should_retry(error, 1)


def test_is_permanent_follows_the_cause_chain() -> None:
    """An error raised ``from`` a Permanent, however deep, is permanent too."""
    root = Permanent("card declined")
    middle = RuntimeError("payment failed")
    middle.__cause__ = root
    outer = ValueError("order failed")
    outer.__cause__ = middle
    assert is_permanent(outer)
    assert is_permanent(middle)


def test_permanent_wrapping_an_outside_error_is_permanent() -> None:
    """``raise Permanent(...) from err`` marks an outside error as not retryable."""
    outer = Permanent("bad request")
    outer.__cause__ = ConnectionError("400")
    assert is_permanent(outer)


def test_ordinary_errors_are_not_permanent() -> None:
    """An ordinary error, even one chained from another ordinary error, is retryable."""
    error = RuntimeError("outer")
    error.__cause__ = KeyError("inner")
    assert not is_permanent(error)
    assert not is_permanent(ValueError())


def test_is_permanent_stops_on_a_cause_cycle() -> None:
    """A cycle in __cause__ does not hang is_permanent."""
    first, second = RuntimeError("a"), RuntimeError("b")
    first.__cause__, second.__cause__ = second, first
    assert not is_permanent(first)
