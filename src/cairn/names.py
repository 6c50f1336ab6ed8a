"""The names cairn stores and indexes, checked before anything is written.

Task ids, batch names, operation keys and scopes, signal, conversation,
schedule, task and limit names are primary keys or index entries in every
store. ``check_name`` refuses, with ``InvalidName``, a name that some store
cannot hold or index:

* empty or blank: a name nobody can type back (``cairn show ''``);
* longer than ``NAME_LIMIT_BYTES`` in UTF-8. The limit leaves room for two
  names in one PostgreSQL btree entry (about 2,700 bytes; ``(task_id, name)``
  and ``(scope, key)`` are such pairs). Operation keys are shortened to 200
  characters by ``cairn.keys.bounded_key`` instead, and item keys are hashed
  when long, so only a name given as-is can be too long;
* a lone surrogate (``"\\ud800"``, from bytes decoded with
  ``errors="surrogateescape"``): not valid Unicode, so no UTF-8 store holds it;
* a NUL character: PostgreSQL text cannot hold it.

ASCII text (nearly every name) is checked in O(1) for everything but NUL and
blankness; only other text is encoded to find its length in bytes.
"""

from __future__ import annotations

from cairn.errors import InvalidName

__all__ = ["NAME_LIMIT_BYTES", "check_name"]

NAME_LIMIT_BYTES = 1000
_SHOWN = 60  # characters of a long name quoted in a message


def check_name(
    kind: str, value: str, *, max_bytes: int | None = NAME_LIMIT_BYTES, empty_ok: bool = False
) -> str:
    """Return ``value`` if it can be stored as a ``kind`` ("task id", "batch
    name", ...); raise ``InvalidName`` saying what is wrong and how to fix it.

    ``max_bytes=None`` for names shortened elsewhere (operation keys);
    ``empty_ok`` for names whose empty form means "the default" (a scope)."""
    if not isinstance(value, str):
        raise TypeError(f"a {kind} must be a str, not {type(value).__name__} ({value!r})")
    if value.isascii():
        size = len(value)
    else:
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise _surrogate(kind, value, exc.start) from None
    if "\x00" in value:
        raise InvalidName(
            f"the {kind} {_shown(value)} holds a NUL character ('\\x00' at position "
            f"{value.index(chr(0))}), which PostgreSQL text cannot store. Remove it. "
            "Nothing was written.",
            kind=kind,
            value=value,
        )
    if not value.strip() and not (empty_ok and not value):
        raise InvalidName(
            f"a {kind} must not be empty or blank (got {value!r}): cairn stores work "
            f"under it and finds it again by it. Give a {kind} with visible text. "
            "Nothing was written.",
            kind=kind,
            value=value,
        )
    if max_bytes is not None and size > max_bytes:
        raise InvalidName(
            f"the {kind} {_shown(value)} is {size} bytes long in UTF-8; cairn accepts up "
            f"to {max_bytes}, so that every store can index it. Use a shorter {kind}: "
            "keep the readable part and replace the long part with a hash of it (as "
            "cairn.op_key does for key parts). Nothing was written.",
            kind=kind,
            value=value,
        )
    return value


def _surrogate(kind: str, value: str, position: int) -> InvalidName:
    return InvalidName(
        f"the {kind} {_shown(value)} holds a lone surrogate ({value[position]!r} at "
        f"position {position}), which is not valid Unicode, so no store can hold it. "
        "It usually comes from bytes decoded with errors='surrogateescape'; clean the "
        "text first, e.g. text.encode('utf-8', 'replace').decode('utf-8'). Nothing was "
        "written.",
        kind=kind,
        value=value,
    )


def _shown(value: str) -> str:
    """``value`` as a message quotes it: its repr (which escapes surrogates and
    NULs, so the message itself can be stored), cut short if long."""
    if len(value) <= _SHOWN:
        return repr(value)
    return f"{value[:_SHOWN]!r}... ({len(value)} characters)"
