"""List channels kept append-only: what to store for a new version, and how to
rebuild any version.

LangGraph hands a saver the whole value of every channel that changed, so a
messages channel arrives in full at every checkpoint. Stored as it comes, a
thread of n turns holds n copies of its early messages (LangGraph's
``SqliteSaver`` grows quadratically that way). Here a new version of a list
channel whose previous value is a prefix of it is stored as the items appended
since that value, naming its base version; a version that is not an extension
(a message removed or replaced by id, the first version) is stored whole.

``ListCache`` remembers, per thread, namespace and channel, the last version
this process wrote or read, so that checking the prefix and loading the latest
value cost no reads. Items are compared by identity first: LangGraph's
reducers (``add_messages``, ``operator.add``) build the new list from the same
item objects, so the check is a pointer comparison per item. Items are treated
as values: an item changed in place after it was checkpointed is not seen as a
change (LangGraph replaces a message by id rather than mutating it).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

_CACHED_CHANNELS = 512  # (thread, namespace, channel) entries kept, least recent dropped

Key = tuple[str, str, str]  # thread id, checkpoint namespace, channel


class Stored(NamedTuple):
    """One version as stored: ``kind`` is "value" or "append"; ``base`` the
    version an append extends; ``items`` the decoded value or appended items."""

    kind: str
    base: str | None
    items: Any


class Known(NamedTuple):
    version: str
    items: tuple[Any, ...]


def extends(base: Sequence[Any], value: Sequence[Any]) -> bool:
    """Whether ``value`` starts with every item of ``base``, in order. Compared as
    two lists, in C: each pair by identity first, then by equality, as Python
    compares list items; a generator doing the same cost a third of a
    millisecond a turn at 2,000 messages."""
    if len(value) < len(base):
        return False
    return list(base) == list(value[: len(base)])


class ListCache:
    """The last known version of each list channel, per thread and namespace."""

    def __init__(self) -> None:
        self._known: OrderedDict[Key, Known] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Key) -> Known | None:
        with self._lock:
            known = self._known.get(key)
            if known is not None:
                self._known.move_to_end(key)
            return known

    def remember(self, key: Key, version: str, items: Sequence[Any]) -> None:
        with self._lock:
            self._known[key] = Known(version, tuple(items))
            self._known.move_to_end(key)
            while len(self._known) > _CACHED_CHANNELS:
                self._known.popitem(last=False)

    def forget_thread(self, thread_id: str) -> None:
        with self._lock:
            for key in [k for k in self._known if k[0] == thread_id]:
                del self._known[key]


def rebuild(
    version: str,
    lookup: Callable[[str], Stored | None],
    memo: dict[str, tuple[list[Any], int]],
) -> list[Any]:
    """The full value of ``version`` from a channel's stored entries (``lookup``
    finds one by version).

    ``memo`` keeps every version rebuilt on the way, for the next call on the
    same channel, as (list, length): along a chain of appends each version's
    value is a prefix of the last one's, so one list serves them all and a walk
    costs one pass over the items, however many versions it crosses."""
    chain: list[tuple[str, Stored]] = []
    seen: set[str] = set()
    cursor: str | None = version
    while cursor is not None and cursor not in memo:
        row = lookup(cursor)
        if row is None:
            raise LookupError(f"version {cursor} of a list channel is not stored")
        chain.append((cursor, row))
        seen.add(cursor)
        cursor = row.base if row.kind == "append" else None
        if cursor in seen:
            raise LookupError(f"version {cursor} of a list channel is its own base")
    value: list[Any] = []
    if cursor is not None:
        source, length = memo[cursor]
        value = source[:length]
    for step, row in reversed(chain):
        if row.kind == "append":
            value.extend(row.items)
        else:
            value = list(row.items)
        memo[step] = (value, len(value))
    source, length = memo[version]
    return source[:length]


def base_for(
    cached: Known | None,
    value: Sequence[Any],
    parent: Callable[[], Known | None],
) -> Known | None:
    """The stored version ``value`` can be an append to: the cached one if ``value``
    extends it, else the parent checkpoint's version of the channel (``parent``
    loads it), else none (store ``value`` whole)."""
    if cached is not None and extends(cached.items, value):
        return cached
    found = parent()
    if found is not None and extends(found.items, value):
        return found
    return None
