"""Operation keys: ``op_key`` builds stable, readable, bounded keys from parts;
``bounded_key`` checks a key given as-is and hashes it when it is too long."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any
from uuid import UUID

import pytest

from cairn import op_key
from cairn.keys import KEY_LIMIT, bounded_key

HASHED_SUFFIX_LENGTH = 1 + 12  # "~" and 12 hex digits of the part's sha256


def test_parts_join_into_a_readable_key() -> None:
    """Plain parts and a date join with "/" into the readable key the issue shows."""
    assert op_key("admob", "app123", "campaign", date(2026, 5, 24)) == (
        "admob/app123/campaign/2026-05-24"
    )


def test_ints_uuids_and_decimals_are_parts_too() -> None:
    """An int, a UUID and a Decimal become their plain text."""
    uid = UUID("12345678-1234-5678-1234-567812345678")
    assert op_key("order", 42, uid, Decimal("9.50")) == (
        "order/42/12345678-1234-5678-1234-567812345678/9.50"
    )


def test_whitespace_is_trimmed_and_runs_become_one_dash() -> None:
    """Leading and trailing spaces go; inner runs of whitespace become one "-"."""
    assert op_key("  admob ", "app\t 123", "big\n\ncampaign") == "admob/app-123/big-campaign"


def test_odd_part_is_hashed_behind_a_readable_prefix() -> None:
    """A part with characters outside the safe set keeps a readable prefix and a hash.

    A "/" inside a part must not pass as a separator, so ("a/b",) and ("a", "b")
    give different keys.
    """
    key = op_key("slack", "#ops channel/alerts")
    prefix, _, rest = key.partition("/")
    assert prefix == "slack"
    readable, tilde, digest = rest.partition("~")
    assert tilde == "~"
    assert readable == "ops-channel-alerts"
    assert len(digest) == 12
    assert all(c in "0123456789abcdef" for c in digest)
    assert op_key("a/b") != op_key("a", "b")


def test_long_part_is_hashed_with_a_prefix_and_stays_stable() -> None:
    """A part over 64 characters becomes its first 24 characters, "~" and a hash,
    the same on every call."""
    long_part = "x" * 65
    key = op_key("llm", long_part)
    assert key == op_key("llm", long_part)
    assert key.startswith("llm/" + "x" * 24 + "~")
    assert len(key) == len("llm/") + 24 + HASHED_SUFFIX_LENGTH
    assert op_key("llm", "x" * 64) == "llm/" + "x" * 64


def test_hashed_parts_that_differ_give_different_keys() -> None:
    """Two long parts sharing their readable prefix still give different keys."""
    first = op_key("prompt", "a" * 80 + "1")
    second = op_key("prompt", "a" * 80 + "2")
    assert first != second
    assert first.split("~")[0] == second.split("~")[0]


def test_aware_datetime_is_a_part() -> None:
    """A tz-aware datetime becomes its ISO text, offset included."""
    moment = datetime(2026, 5, 24, 9, 30, tzinfo=UTC)
    assert op_key("run", moment) == "run/2026-05-24T09:30:00+00:00"
    paris = datetime(2026, 5, 24, 11, 30, tzinfo=timezone(timedelta(hours=2)))
    assert op_key("run", paris) == "run/2026-05-24T11:30:00+02:00"


def test_naive_datetime_is_refused() -> None:
    """A naive datetime is ambiguous across machines, so it is refused."""
    with pytest.raises(ValueError, match="naive datetime"):
        op_key("run", datetime(2026, 5, 24, 9, 30))


@pytest.mark.parametrize(
    ("part", "type_name"),
    [(True, "bool"), (1.5, "float"), (None, "NoneType"), (b"raw", "bytes"), ([1], "list")],
)
def test_parts_of_other_types_are_refused_by_name(part: Any, type_name: str) -> None:
    """bool, float, None and other types are refused with a message naming the type
    and the accepted ones (a bool would silently read as 1, a float as 0.30000000000000004)."""
    with pytest.raises(TypeError) as refused:
        op_key("app", part)
    message = str(refused.value)
    assert type_name in message
    assert "str, int, date, datetime, UUID or Decimal" in message


def test_no_parts_is_refused() -> None:
    """op_key() with nothing to name the effect is an error that shows an example."""
    with pytest.raises(ValueError, match="at least one part"):
        op_key()


@pytest.mark.parametrize("blank", ["", "   ", "\t\n"])
def test_blank_parts_are_refused(blank: str) -> None:
    """An empty or whitespace-only part is refused rather than producing "a//b"."""
    with pytest.raises(ValueError, match="empty or blank"):
        op_key("a", blank, "b")


def test_many_parts_are_bounded_by_the_key_limit() -> None:
    """A key joined from many parts is shortened by hashing, never cut silently."""
    parts = [f"part{i:03d}" for i in range(40)]
    key = op_key(*parts)
    assert len(key) <= KEY_LIMIT
    assert key.startswith("part000/part001/")
    assert key == op_key(*parts)
    assert key != op_key(*parts[:-1], "part999")


def test_bounded_key_leaves_short_keys_as_they_are() -> None:
    """A key up to the limit is returned unchanged, odd characters included."""
    assert bounded_key("stripe/charge/order 7") == "stripe/charge/order 7"
    exact = "k" * KEY_LIMIT
    assert bounded_key(exact) == exact


def test_bounded_key_hashes_long_keys_keeping_a_prefix() -> None:
    """A key over the limit keeps a readable prefix and ends in a hash of the whole
    key: deterministic, within the limit, and distinct keys stay distinct."""
    long_key = "admob/app123/" + "z" * 500
    short = bounded_key(long_key)
    assert len(short) <= KEY_LIMIT
    assert short.startswith("admob/app123/zzz")
    assert short == bounded_key(long_key)
    other = bounded_key(long_key[:-1] + "y")
    assert other != short
    assert bounded_key("k" * (KEY_LIMIT + 1)) != "k" * KEY_LIMIT


@pytest.mark.parametrize("bad", [7, None, b"key", ("a", "b")])
def test_bounded_key_refuses_non_strings(bad: Any) -> None:
    """A key that is not a str is a TypeError that points to op_key."""
    with pytest.raises(TypeError, match="op_key"):
        bounded_key(bad)


@pytest.mark.parametrize("blank", ["", " ", "\n\t "])
def test_bounded_key_refuses_blank_keys(blank: str) -> None:
    """An empty or whitespace-only key names nothing and is refused."""
    with pytest.raises(ValueError, match="must not be empty"):
        bounded_key(blank)
