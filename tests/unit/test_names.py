"""Tests for cairn.names: one check for every name cairn stores and indexes."""

from __future__ import annotations

from typing import Any

import pytest

from cairn import InvalidName
from cairn.keys import bounded_key, op_key
from cairn.names import NAME_LIMIT_BYTES, check_name


@pytest.mark.parametrize(
    "name",
    [
        "review/app_id=a1",
        "reviews 2026-05-24",
        "レビュー/日本",
        "emoji \U0001f600",
        "x" * NAME_LIMIT_BYTES,
    ],
    ids=["ascii", "spaces", "cjk", "astral", "at-the-limit"],
)
def test_names_any_store_can_hold_are_returned_unchanged(name: str) -> None:
    """Names of visible text up to the limit, in any script, pass unchanged."""
    assert check_name("task id", name) is name


@pytest.mark.parametrize("blank", ["", " ", "\t\n"])
def test_an_empty_or_blank_name_is_refused(blank: str) -> None:
    """An empty or blank name is InvalidName (also a ValueError) that says what kind
    of name it was, that it must have visible text, and that nothing was written."""
    with pytest.raises(InvalidName) as refused:
        check_name("batch name", blank)
    assert isinstance(refused.value, ValueError)
    assert (refused.value.kind, refused.value.value) == ("batch name", blank)
    message = str(refused.value)
    assert "a batch name must not be empty or blank" in message
    assert "Nothing was written" in message


def test_an_empty_name_may_mean_the_default_where_asked() -> None:
    """empty_ok lets the empty name through (a scope's default) but not a blank one."""
    assert check_name("operation scope", "", empty_ok=True) == ""
    with pytest.raises(InvalidName, match="must not be empty or blank"):
        check_name("operation scope", "  ", empty_ok=True)


@pytest.mark.parametrize(
    ("name", "size"),
    [("x" * (NAME_LIMIT_BYTES + 1), NAME_LIMIT_BYTES + 1), ("é" * 600, 1200), ("日" * 400, 1200)],
    ids=["ascii", "two-byte", "three-byte"],
)
def test_a_name_too_long_for_an_index_is_refused_by_its_size_in_bytes(name: str, size: int) -> None:
    """Length is counted in UTF-8 bytes, as an index entry holds it: 600 'é' are
    too long though 600 characters would fit. The message gives both numbers,
    quotes only the start of the name and says how to shorten it."""
    with pytest.raises(InvalidName) as refused:
        check_name("task id", name)
    message = str(refused.value)
    assert f"is {size} bytes long in UTF-8; cairn accepts up to {NAME_LIMIT_BYTES}" in message
    assert f"... ({len(name)} characters)" in message
    assert "hash" in message
    assert len(message) < 600


def test_no_length_limit_where_the_caller_shortens_names_itself() -> None:
    """max_bytes=None leaves the length to the caller (operation keys are hashed)."""
    assert check_name("operation key", "k" * 10_000, max_bytes=None) == "k" * 10_000


@pytest.mark.parametrize(
    ("name", "shown"),
    [("task\ud800", "'\\ud800' at position 4"), ("\udc80x", "'\\udc80' at position 0")],
)
def test_a_lone_surrogate_is_refused_saying_where_and_how_to_clean_it(
    name: str, shown: str
) -> None:
    """A name holding a lone surrogate names the character and its position, says
    how to clean the text, and holds no surrogate itself (it can be stored)."""
    with pytest.raises(InvalidName) as refused:
        check_name("signal name", name)
    message = str(refused.value)
    assert f"holds a lone surrogate ({shown})" in message
    assert "errors='surrogateescape'" in message
    assert "text.encode('utf-8', 'replace')" in message
    message.encode("utf-8")


def test_a_nul_character_is_refused_because_postgresql_text_cannot_hold_it() -> None:
    """A NUL character is refused on every store, naming its position, so a name
    that works on SQLite does not fail later on PostgreSQL."""
    with pytest.raises(InvalidName, match=r"NUL character \('\\x00' at position 3\)"):
        check_name("conversation name", "abc\x00def")


@pytest.mark.parametrize("bad", [7, None, b"id"])
def test_a_name_that_is_not_text_is_a_type_error(bad: Any) -> None:
    """A name must be a str; anything else is a TypeError naming the kind."""
    with pytest.raises(TypeError, match="a task id must be a str"):
        check_name("task id", bad)


def test_operation_keys_with_a_surrogate_or_nul_are_refused_before_hashing() -> None:
    """bounded_key refuses a key holding a lone surrogate or a NUL (a long one
    would otherwise fail inside the hash), and still shortens a long good one."""
    with pytest.raises(InvalidName, match="operation key"):
        bounded_key("post/\ud800")
    with pytest.raises(InvalidName, match="operation key"):
        bounded_key("x" * 500 + "\ud800")
    with pytest.raises(InvalidName, match="NUL"):
        bounded_key("a\x00b")
    assert len(bounded_key("é" * 5000)) <= 200
    with pytest.raises(InvalidName, match="op_key part"):
        op_key("stripe", "order\ud800")
