"""Operation keys: stable, readable, bounded.

A key names one side effect in the outside world, such as "apply the new
settings of app123 on 2026-05-24". The same effect must get the same key on every
run, on every machine. ``op_key`` builds one from parts::

    op_key("admob", "app123", "campaign", date(2026, 5, 24))
    # 'admob/app123/campaign/2026-05-24'

Parts that are long or hold odd characters are replaced by a readable prefix and
a hash, so keys stay printable and unique. A whole key longer than ``KEY_LIMIT``
is shortened the same way, never cut silently.
"""

from __future__ import annotations

import hashlib
import re
from datetime import date, datetime
from decimal import Decimal
from uuid import UUID

from cairn.names import check_name

KEY_LIMIT = 200
_PART_LIMIT = 64
_SAFE_PART = re.compile(r"^[A-Za-z0-9._:@=+-]+$")
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9._:@=+-]+")
_SPACES = re.compile(r"\s+")

KeyPart = str | int | date | UUID | Decimal


def _digest(text: str, length: int) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def _part_text(part: KeyPart) -> str:
    if isinstance(part, bool) or not isinstance(part, str | int | date | UUID | Decimal):
        raise TypeError(
            f"op_key parts must be str, int, date, datetime, UUID or Decimal, not "
            f"{type(part).__name__} ({part!r}); convert it to text yourself first"
        )
    if isinstance(part, datetime):
        if part.tzinfo is None:
            raise ValueError(f"op_key part {part!r} is a naive datetime; give it a timezone")
        return part.isoformat()
    if isinstance(part, date):
        return part.isoformat()
    return str(part)


def _normalize_part(part: KeyPart) -> str:
    text = _SPACES.sub("-", _part_text(part).strip())
    if not text:
        raise ValueError("op_key parts must not be empty or blank")
    check_name("op_key part", text, max_bytes=None)  # before hashing it
    if len(text) <= _PART_LIMIT and _SAFE_PART.match(text):
        return text
    readable = _UNSAFE_CHARS.sub("-", text).strip("-")[:24]
    return f"{readable}~{_digest(text, 12)}"


def op_key(*parts: KeyPart) -> str:
    """Join ``parts`` into a stable operation key, ``/``-separated."""
    if not parts:
        raise ValueError("op_key needs at least one part, e.g. op_key('stripe', order_id)")
    return bounded_key("/".join(_normalize_part(p) for p in parts))


def bounded_key(key: str, *, kind: str = "operation key") -> str:
    """Check a key given as-is, and shorten it by hashing if it is too long.

    ``kind`` names the key in errors as the user knows it: a name cairn builds
    from one of the user's strings (a map item's key) is refused as that
    string's field, not as an operation key the user never wrote."""
    if not isinstance(key, str):
        raise TypeError(
            f"the {kind} must be a str, not {type(key).__name__} ({key!r}); build "
            "one with cairn.op_key(...)"
        )
    if not key.strip():
        raise ValueError(
            f"the {kind} must not be empty: it names the side effect, e.g. "
            "op_key('admob', app_id, 'apply', day)"
        )
    check_name(kind, key, max_bytes=None)  # the length is bounded below
    if len(key) <= KEY_LIMIT:
        return key
    return f"{key[: KEY_LIMIT - 34]}~{_digest(key, 32)}"


# Between a task's id and its run number in a key ``run_key`` builds. ``op_key``
# never writes a '#' (a part holding one is replaced by a readable prefix and a
# hash), so the last one in such a key ends the task's id: two tasks, or two
# runs of one task, never build the same key.
RUN_MARK = "#run"


def run_key(task_id: str, run: int, *parts: KeyPart) -> str:
    """An operation key that belongs to one run of one task:
    ``TASK#runN/`` and ``op_key(*parts)``. A rerun of the task from a step
    (``cairn rerun``) is run N+1, so an effect keyed so happens again in it,
    once; a key built with ``op_key`` alone names the effect for good, and a
    rerun finds it done (docs/reruns.md)."""
    return bounded_key(f"{task_id}{RUN_MARK}{run}/{op_key(*parts)}")
