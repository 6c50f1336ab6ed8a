"""The checks of debounce and singleton options (``cairn.gates``)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cairn.errors import ConfigurationError, InvalidName
from cairn.gates import LONGEST_WINDOW, check_on_conflict, check_singleton, window_ms


@pytest.mark.parametrize(
    ("given", "ms"),
    [
        (30, 30_000),
        (0.25, 250),
        (0.001, 1),
        (timedelta(minutes=2), 120_000),
        (LONGEST_WINDOW, 2_592_000_000),
    ],
)
def test_a_window_is_kept_in_whole_milliseconds(given: float | timedelta, ms: int) -> None:
    """Seconds or a timedelta, from a millisecond to thirty days, as milliseconds."""
    assert window_ms(given) == ms


@pytest.mark.parametrize("given", [True, None, "30", -1, 0.0004, float("inf"), 30 * 86_400 + 1])
def test_a_window_out_of_range_or_of_another_type_is_refused(given: object) -> None:
    """A bool, text, a negative or infinite number, or more than 30 days: refused."""
    with pytest.raises(ConfigurationError, match="debounce"):
        window_ms(given)


def test_a_singleton_key_is_a_name_cairn_can_store() -> None:
    """A key is returned as given; one with NUL, blank, or over 1,000 bytes is refused."""
    assert check_singleton("sync/acct-1") == "sync/acct-1"
    for bad in ("x\x00", " ", "é" * 501):
        with pytest.raises(InvalidName):
            check_singleton(bad)


def test_on_conflict_is_drop_or_queue() -> None:
    """Only the two choices are accepted; the error names both."""
    assert check_on_conflict("queue") == "queue"
    with pytest.raises(ConfigurationError, match=r"'drop'.*'queue'"):
        check_on_conflict("skip")
