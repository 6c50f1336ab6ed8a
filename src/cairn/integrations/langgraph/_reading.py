"""Checkpoints as LangGraph reads them, from a decoded place.

A checkpoint row holds only the channel values that changed in it; the value
of a channel at a version is found among the place's entries (the first one
stored for that channel and version, as format 1's blob rows were keyed), and
a list channel's value is rebuilt from its appends (``_lists.rebuild``).
Pending writes are the checkpoint's writes rows folded in the order they were
stored: a task's first write of an index stays, unless a later call wrote only
special writes (an error, an interrupt, a resume), which replace.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, CheckpointTuple

from cairn.integrations.langgraph._lists import ListCache, Stored, rebuild
from cairn.integrations.langgraph._packing import check_format
from cairn.integrations.langgraph._place import Key, Place
from cairn.integrations.langgraph._rows import APPEND, CheckpointRecord, WritesRecord

Load = Callable[[tuple[str, bytes]], Any]  # a stored (tag, data) pair, decoded
ABSENT: Any = object()


class Values:
    """Channel values of one place, each version decoded once; the lists this
    process remembers (``lists``) are taken as they are, not decoded."""

    def __init__(
        self,
        place: Place,
        key: Key,
        lists: ListCache | None,
        load: Load,
        *,
        remember: bool = False,
    ) -> None:
        self.place, self._key, self._lists, self._load = place, key, lists, load
        self._remember = remember
        self._stored: dict[tuple[str, str], Stored] = {}
        self._built: dict[str, dict[str, tuple[list[Any], int]]] = {}

    def of(self, versions: Mapping[str, Any]) -> dict[str, Any]:
        """The values of the channels ``versions`` names (a channel without a
        stored value at its version has none)."""
        found: dict[str, Any] = {}
        for channel, version in versions.items():
            value = self.value(channel, str(version))
            if value is not ABSENT:
                found[channel] = value
        return found

    def value(self, channel: str, version: str) -> Any:
        """The value of ``channel`` at ``version``, ``ABSENT`` if it has none."""
        cache_key = (*self._key, channel)
        known = None if self._lists is None else self._lists.get(cache_key)
        if known is not None and known.version == version:
            return list(known.items)
        entry = self.place.entry((channel, version))
        if entry is None:
            return ABSENT
        if entry.kind != APPEND:
            return self._load(entry.typed)
        memo = self._built.setdefault(channel, {})
        value = rebuild(version, lambda v: self._entry(channel, v), memo)
        if self._remember and self._lists is not None:
            self._lists.remember(cache_key, version, value)
        return value

    def _entry(self, channel: str, version: str) -> Stored | None:
        found = self._stored.get((channel, version))
        if found is None:
            entry = self.place.entry((channel, version))
            if entry is None:
                return None
            kind = "append" if entry.kind == APPEND else "value"
            found = Stored(kind, entry.base, self._load(entry.typed))
            self._stored[(channel, version)] = found
        return found


def checkpoint_tuple(
    key: Key, checkpoint: tuple[str, CheckpointRecord], values: Values, load: Load
) -> CheckpointTuple:
    """The tuple LangGraph reads for a checkpoint (its id and record) of place
    ``key``, whose values ``values`` reads."""
    thread, ns = key
    checkpoint_id, record = checkpoint
    found: Checkpoint = load(record.body)
    found["id"] = checkpoint_id
    check_format(found, f"stored checkpoint {checkpoint_id!r} of thread {thread!r}")
    found["channel_values"] = values.of(found["channel_versions"])
    writes = pending(values.place.writes_of(checkpoint_id))
    return CheckpointTuple(
        config=config_of(thread, ns, checkpoint_id),
        checkpoint=found,
        metadata=load(record.metadata),
        parent_config=config_of(thread, ns, record.parent) if record.parent else None,
        pending_writes=[(task, channel, load(typed)) for task, channel, typed in writes],
    )


def pending(rows: Iterable[WritesRecord]) -> list[tuple[str, str, tuple[str, bytes]]]:
    """A checkpoint's writes, folded (see the module's docstring), ordered by task
    path, task and index as LangGraph's savers return them."""
    found: dict[tuple[str, int], tuple[str, str, tuple[str, bytes]]] = {}
    for row in rows:
        replaces = row.replaces()
        for write in row.writes:
            slot = (row.task, write.idx)
            if replaces or slot not in found:
                found[slot] = (row.path, write.channel, write.typed)
    ordered = sorted(found.items(), key=lambda item: (item[1][0], item[0][0], item[0][1]))
    return [(task, channel, typed) for (task, _), (_, channel, typed) in ordered]


def config_of(thread: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}
    }
