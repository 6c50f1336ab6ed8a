"""What a ``put`` stores: an entry for each channel that changed.

A value is stored whole, except a list channel's new version that extends a
version already stored (the one this process remembers, or the parent
checkpoint's): that one is stored as the items appended, naming the version
it extends (``_lists``). Which versions are stored is only sure inside the
write's transaction, once the place is locked, so the entries are chosen
before it (``candidates``, no lock held) and settled in it (``settle``): an
append whose base is not stored any more (another process pruned the thread)
is stored whole, and a version the place already holds is not stored again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, NamedTuple

from langgraph.checkpoint.base import ChannelVersions

from cairn.integrations.langgraph._lists import Known, ListCache, base_for
from cairn.integrations.langgraph._packing import check_text
from cairn.integrations.langgraph._place import Place
from cairn.integrations.langgraph._rows import APPEND, VALUE, Entry, Typed, WritesRecord

Dump = Callable[[Any], Typed]
ParentList = Callable[[str], Known | None]  # a channel's value at the parent checkpoint


class Candidate(NamedTuple):
    """An entry to store, and for a list the whole value (stored instead if the
    append's base is gone, and remembered once stored)."""

    entry: Entry
    whole: list[Any] | None


def candidates(
    values: Mapping[str, Any],
    new_versions: ChannelVersions,
    cached: Callable[[str], Known | None],
    parent: ParentList,
    dump: Dump,
) -> list[Candidate]:
    """The entries for the channels that changed (``new_versions``) and have a
    value; ``cached`` is the list this process remembers for a channel."""
    found: list[Candidate] = []
    for channel, raw_version in new_versions.items():
        check_text("LangGraph channel name", channel)
        version = str(raw_version)
        if channel not in values:
            continue  # a channel with a version and no entry reads as empty
        value = values[channel]
        if not isinstance(value, list):
            found.append(Candidate(Entry(channel, version, VALUE, None, dump(value)), None))
            continue
        base = base_for(cached(channel), value, partial(parent, channel))
        if base is None:
            found.append(Candidate(Entry(channel, version, VALUE, None, dump(value)), value))
        elif base.version != version:
            added = dump(value[len(base.items) :])
            found.append(Candidate(Entry(channel, version, APPEND, base.version, added), value))
    return found


def settle(found: Sequence[Candidate], place: Place, dump: Dump) -> list[Candidate]:
    """The candidates to store in ``place`` as it is now (locked)."""
    settled: list[Candidate] = []
    for candidate in found:
        entry = candidate.entry
        if (entry.channel, entry.version) in place.homes:
            continue  # stored already: the first entry of a version is the one read
        if entry.kind == APPEND and (entry.channel, entry.base) not in place.homes:
            entry = Entry(entry.channel, entry.version, VALUE, None, dump(candidate.whole))
        settled.append(Candidate(entry, candidate.whole))
    return settled


def remember(lists: ListCache, key: tuple[str, str], stored: Sequence[Candidate]) -> None:
    """Remember the lists just stored, so the next put compares with them."""
    for candidate in stored:
        if candidate.whole is not None:
            channel, version = candidate.entry.channel, candidate.entry.version
            lists.remember((*key, channel), version, candidate.whole)


def redundant(record: WritesRecord, place: Place) -> bool:
    """Whether storing ``record`` would change nothing LangGraph reads: every
    index of the task already written, and none of them a replacing one."""
    if record.replaces():
        return False
    stored = {
        write.idx for row in place.writes_of(record.checkpoint, record.task) for write in row.writes
    }
    return all(write.idx in stored for write in record.writes)
