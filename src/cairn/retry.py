"""Retry policies: how many attempts, how long to wait, and which errors count.

A ``Retry`` is a small frozen value. cairn asks it two questions after an attempt
fails: *may this error be tried again?* (``should_retry``) and *how long to wait
before attempt n+1?* (``delay``). Attempt numbers are durable, so the answers are
the same after a crash as they would have been without one.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from cairn.errors import (
    BlobCorrupt,
    BlobMissing,
    CairnControl,
    ChildFailed,
    CodecError,
    ConfigurationError,
    InvalidName,
    NestedStepError,
    NonDeterminismError,
    OperationError,
    Permanent,
    RetryAfter,
)

ErrorPredicate = Callable[[BaseException], bool]

# Errors that retrying can never fix: the code or the data is wrong, or the user
# said so. They fail the step or task at once whatever the policy says.
_NEVER_RETRIED: tuple[type[BaseException], ...] = (
    Permanent,
    ConfigurationError,
    InvalidName,  # a name no store can hold: the code gives it again
    NonDeterminismError,
    NestedStepError,
    CodecError,
    BlobMissing,  # an operator must restore it; BlobError alone (a network fault) may pass
    BlobCorrupt,
    OperationError,
    CairnControl,
    # A child's end is final until an operator retries the child.
    ChildFailed,
)


def _always(_: BaseException) -> bool:
    return True


def _never(_: BaseException) -> bool:
    return False


@dataclass(frozen=True, kw_only=True)
class Retry:
    """How a step or task is retried.

    Args:
        attempts: total attempts, the first included; 1 means no retry.
        initial_delay: seconds to wait before the second attempt.
        backoff: factor applied to the delay after each further failure.
        max_delay: the delay never grows past this many seconds.
        jitter: fraction of the delay added at random (0.1 = up to +10%),
            so that many tasks failing together do not retry together.
        retry_on: an error is retried only if this returns True (default: all).
        give_up_on: an error for which this returns True is never retried.
        max_deferral: seconds a step may spend, in all, waiting because the
            outside service raised ``RetryAfter``. Such waits spend no attempt;
            a deferral that would go past this counts as a failed attempt
            instead, so a service that says "later" forever cannot hang a task.

    ``Permanent`` errors, configuration errors, non-determinism and encoding
    errors are never retried.
    """

    attempts: int = 3
    initial_delay: float = 1.0
    backoff: float = 2.0
    max_delay: float = 60.0
    jitter: float = 0.1
    retry_on: ErrorPredicate = field(default=_always, compare=False)
    give_up_on: ErrorPredicate = field(default=_never, compare=False)
    max_deferral: float = 3600.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"Retry(attempts={self.attempts}): attempts must be at least 1")
        if self.initial_delay < 0 or self.max_delay < 0:
            raise ValueError("Retry delays must be zero or positive seconds")
        if self.backoff < 1:
            raise ValueError(f"Retry(backoff={self.backoff}): backoff must be at least 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"Retry(jitter={self.jitter}): jitter must be between 0 and 1")
        if not self.max_deferral >= 0:  # also refuses NaN
            raise ValueError(
                f"Retry(max_deferral={self.max_deferral}): must be zero or positive seconds"
            )

    def should_retry(self, error: BaseException, attempts_made: int) -> bool:
        """True if ``error``, raised by attempt number ``attempts_made``, may be retried."""
        if attempts_made >= self.attempts or is_permanent(error):
            return False
        return self.retry_on(error) and not self.give_up_on(error)

    def deferral(self, error: BaseException, deferred: float) -> float | None:
        """Seconds to wait before calling again without spending an attempt, when
        ``error`` is (or wraps) a ``RetryAfter`` and the step has waited
        ``deferred`` seconds so far this way; None if it counts as a failure."""
        asked = retry_after_of(error)
        if asked is None or is_permanent(error) or self.give_up_on(error):
            return None
        if deferred + asked.seconds > self.max_deferral:
            return None
        return asked.seconds

    def delay(self, attempts_made: int, *, rng: random.Random | None = None) -> float:
        """Seconds to wait after attempt number ``attempts_made`` failed."""
        try:
            grown = self.initial_delay * self.backoff ** (attempts_made - 1)
        except OverflowError:
            grown = self.max_delay  # a policy that retries for days: capped, not a crash
        base = min(self.max_delay, grown)
        spread = (rng or random).random() * self.jitter * base
        return min(self.max_delay, base + spread)


NO_RETRY = Retry(attempts=1, initial_delay=0.0, jitter=0.0)


def is_permanent(error: BaseException) -> bool:
    """True if no policy may retry ``error``: it, or an error it wraps, is permanent."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, _NEVER_RETRIED):
            return True
        seen.add(id(current))
        current = current.__cause__
    return False


def retry_after_of(error: BaseException) -> RetryAfter | None:
    """The ``RetryAfter`` that ``error`` is, or wraps through ``__cause__``, if any."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, RetryAfter):
            return current
        seen.add(id(current))
        current = current.__cause__
    return None
