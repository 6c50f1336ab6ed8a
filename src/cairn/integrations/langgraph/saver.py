"""``CairnSaver``: a LangGraph checkpointer on a cairn store (SQLite or PostgreSQL).

Every statement runs through the store's own primitives (``_exec`` for a read,
``_atomically`` under ``_writing`` for a write), so the checkpointer gets what
cairn's engine gets: one connection per thread and the process's write lock on
SQLite, the pool with its reconnects on PostgreSQL, and every driver error
turned into a ``StoreError`` that says what to do. The tables are its own
(``cairn.integrations.langgraph._tables``).

What differs from LangGraph's savers is how a thread is kept (format 3): a
list channel as appends (``_lists``), so a thread's storage grows with its
messages, not with its messages times its turns; one row per checkpoint and
per ``put_writes`` call (``_rows``), each compressed against the rows before
it (``_chain``), so each text is stored once. A saver keeps the places
(thread namespaces) it read or wrote (``_place``), so a turn reads nothing
back; deleting rows rewrites what stood on them (``_rewrite``).
"""

from __future__ import annotations

import builtins
import random
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from types import TracebackType
from typing import Any, NamedTuple, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from cairn.errors import NotACairnStore
from cairn.integrations.langgraph import _housekeeping as h
from cairn.integrations.langgraph import _tables as t
from cairn.integrations.langgraph._aio import AsyncMethods
from cairn.integrations.langgraph._chain import StoredRow, id_key, id_text, squeeze
from cairn.integrations.langgraph._lists import Known, ListCache
from cairn.integrations.langgraph._packing import (
    check_format,
    check_ids,
    check_text,
    unknown_tag,
)
from cairn.integrations.langgraph._pinned import Pinned
from cairn.integrations.langgraph._place import Counts, Key, Place, Places
from cairn.integrations.langgraph._reading import Values, checkpoint_tuple, config_of
from cairn.integrations.langgraph._rewrite import rewrite
from cairn.integrations.langgraph._rows import (
    CheckpointRecord,
    Record,
    Write,
    WritesRecord,
    encode,
)
from cairn.integrations.langgraph._setup import setup
from cairn.integrations.langgraph._writing import (
    Candidate,
    candidates,
    redundant,
    remember,
    settle,
)
from cairn.redaction import redacted_error
from cairn.store import open_store
from cairn.store.postgres import PostgresStore
from cairn.store.sqlbase import SQLStore
from cairn.store.sqlcore import Tx
from cairn.store.sqlite import SQLiteStore

T = TypeVar("T")


class CairnSaver(AsyncMethods, BaseCheckpointSaver[str]):
    """A LangGraph checkpointer on a cairn store.

    ``store`` is a cairn store (``app.store``, ``open_store(url)``) or a store URL
    (``sqlite:///agent.db``, ``postgresql://…``); a store the saver opened itself
    is closed by ``close()`` or at the end of ``with CairnSaver(...)``. Its tables
    are created on opening (``setup()`` is idempotent)."""

    def __init__(self, store: SQLStore | str, *, serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=serde)
        self.store, self._owned = _open(store)
        self._backend = "postgres" if isinstance(self.store, PostgresStore) else "sqlite"
        self._lists = ListCache()
        self._places = Places()
        self._pinned = Pinned(
            pin=isinstance(self.store, SQLiteStore), on_close=self.store.close_thread
        )
        try:
            self.setup()
        except BaseException:
            self.close()
            raise

    # -- lifecycle -------------------------------------------------------------------
    def setup(self) -> None:
        """Create the checkpointer's tables if they are missing (idempotent)."""
        self._pinned.call(self._setup)

    def _setup(self) -> None:
        backend, identity = self._backend, self.store.identity
        self._atomically(lambda tx: setup(tx, backend, identity, self._coder()))

    def close(self) -> None:
        """Release the saver's connection; close the store if the saver opened it."""
        self._pinned.close()
        if self._owned:
            self.store.close()

    def __enter__(self) -> CairnSaver:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def get_next_version(self, current: str | None, channel: None = None) -> str:
        """Zero-padded counter and a random tail, as LangGraph's PostgresSaver: a
        thread forked from an old checkpoint never reuses a version of another
        branch (a value is found by its channel and version)."""
        number = 0 if current is None else int(str(current).split(".")[0])
        return f"{number + 1:010d}.{random.getrandbits(32):08x}"

    # -- writing ---------------------------------------------------------------------
    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store ``checkpoint``: the changed channels' new versions, then its row."""
        return self._pinned.call(self._put, config, checkpoint, metadata, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes against the checkpoint ``config`` names."""
        self._pinned.call(self._put_writes, config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint, value and write of ``thread_id``."""
        self._pinned.call(self._delete_thread, thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete every checkpoint whose metadata's ``run_id`` is one of ``run_ids``,
        with its writes (the rows other checkpoints' values stand on stay)."""
        self._pinned.call(self._delete_for_runs, frozenset(str(r) for r in run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, value and write of one thread to another."""
        self._pinned.call(self._copy_thread, source_thread_id, target_thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``"keep_latest"``: keep only each namespace's newest checkpoint of each
        thread (its values whole, its writes); ``"delete"``: delete the threads."""
        if strategy not in h.STRATEGIES:
            raise ValueError(
                f"prune's strategy is {strategy!r}; CairnSaver knows "
                f"{' and '.join(map(repr, h.STRATEGIES))}. Nothing was deleted."
            )
        self._pinned.call(self._prune, list(thread_ids), strategy)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names, or the thread's latest; None if none."""
        return self._pinned.call(self._get_tuple, config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,  # noqa: A002 - LangGraph's name for it
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first: of a thread (and namespace) if ``config`` names
        one, older than ``before``, whose metadata has every ``filter`` item."""
        yield from self._pinned.call(self._list, config, filter, before, limit)

    def _put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread, ns, parent_id = _where(config)
        check_format(checkpoint, f"checkpoint {checkpoint.get('id')!r}")
        checkpoint_id = check_text("LangGraph checkpoint id", checkpoint["id"])
        key = (thread, ns)
        # Stored without its values (they are the entries) and its id (the key).
        body = {k: v for k, v in checkpoint.items() if k not in ("channel_values", "id")}
        meta = get_serializable_checkpoint_metadata(config, metadata)
        record = CheckpointRecord(parent_id or "", self._dump(body), self._dump(meta), ())
        with self._places.lock(key):
            found = candidates(
                checkpoint["channel_values"],
                new_versions,
                lambda channel: self._lists.get((thread, ns, channel)),
                partial(self._parent_list, key, parent_id),
                self._dump,
            )
            stored = self._append(key, record, checkpoint_id, found)
        remember(self._lists, key, stored)
        return config_of(thread, ns, checkpoint_id)

    def _put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> None:
        thread, ns, checkpoint_id = _where(config)
        if checkpoint_id is None:
            raise ValueError(
                "put_writes needs the config of a stored checkpoint (its checkpoint_id)"
            )
        check_text("LangGraph task id", task_id)
        record = WritesRecord(
            checkpoint_id,
            task_id,
            task_path,
            tuple(
                Write(
                    WRITES_IDX_MAP.get(channel, idx),
                    check_text("LangGraph channel name", channel),
                    self._dump(value),
                )
                for idx, (channel, value) in enumerate(writes)
            ),
        )
        key = (thread, ns)
        with self._places.lock(key):
            self._append(key, record, None, [])

    def _append(
        self, key: Key, record: Record, checkpoint_id: str | None, found: builtins.list[Candidate]
    ) -> builtins.list[Candidate]:
        """Store one row at the end of place ``key``'s chain (the caller holds the
        place's lock); the list entries stored. The place is read first if this
        saver's copy is not the stored one (another saver wrote or deleted)."""
        cached = self._places.get(key)
        locked = t.PLACE_COUNTS + self.store.row_lock_clause

        def write(tx: Tx) -> tuple[Place, builtins.list[Candidate], _Written | None]:
            row = tx.exec(locked, key).rows
            if not row:
                tx.exec(t.NEW_PLACE, key)
                row = tx.exec(locked, key).rows
            counts = Counts(row[0][0], row[0][1], row[0][2] or 0)
            place = cached
            if place is None or place.counts != counts:  # another saver wrote or deleted
                place = Place.read(counts, h.stored_rows(tx, counts.place))[0]
            if checkpoint_id is not None and checkpoint_id in place.checkpoints:
                place = self._replace(tx, place, checkpoint_id)
            settled = settle(found, place, self._dump)
            final = record
            if isinstance(record, CheckpointRecord):
                final = record._replace(entries=tuple(c.entry for c in settled))
            elif redundant(record, place):
                return place, settled, None
            raw = encode(final)
            stored_id = None if checkpoint_id is None else id_key(checkpoint_id)
            params = (place.counts.place, place.tip, stored_id, squeeze(raw, place.context))
            rid = tx.exec(t.INSERT_ROW, params).rows[0][0]
            return place, settled, _Written(int(rid), final, raw)

        place, settled, written = self._atomically(write)
        if written is not None:
            place.written(written.rid, checkpoint_id, written.record, written.raw)
        self._places.keep(key, place)
        return settled

    def _replace(self, tx: Tx, place: Place, checkpoint_id: str) -> Place:
        """The place once the stored checkpoint ``checkpoint_id`` is deleted (it is
        being put again); its writes stay, as format 1's upsert kept them."""
        number, gen = tx.exec(t.TAKE_ONE, (place.counts.place,)).rows[0]
        rows = h.stored_rows(tx, number)
        read = Place.read(Counts(number, gen, 0), rows)
        doomed = {read[0].checkpoints[checkpoint_id]}
        return rewrite(tx, read, rows, doomed, self._coder())

    def _delete_thread(self, thread_id: str) -> None:
        thread, _ = check_ids(thread_id, "")
        self._atomically(lambda tx: h.delete_thread(tx, thread))
        self._forget(thread)

    def _delete_for_runs(self, run_ids: frozenset[str]) -> None:
        for thread in self._atomically(lambda tx: h.delete_runs(tx, run_ids, self._coder())):
            self._forget(thread)

    def _copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        source, _ = check_ids(source_thread_id, "")
        target, _ = check_ids(target_thread_id, "")
        self._atomically(lambda tx: h.copy_thread(tx, source, target, self._coder()))
        self._forget(target)

    def _prune(self, thread_ids: builtins.list[str], strategy: str) -> None:
        threads = [check_ids(thread_id, "")[0] for thread_id in thread_ids]

        def prune(tx: Tx) -> None:
            for thread in threads:
                if strategy == "delete":
                    h.delete_thread(tx, thread)
                else:
                    h.keep_latest(tx, thread, self._coder())

        self._atomically(prune)
        for thread in threads:
            self._forget(thread)

    def _forget(self, thread: str) -> None:
        self._places.forget_thread(thread)
        self._lists.forget_thread(thread)

    def _atomically(self, work: Callable[[Tx], T]) -> T:
        with self.store._writing():
            return self.store._atomically(work)

    def _parent_list(self, key: Key, parent_id: str | None, channel: str) -> Known | None:
        """The parent checkpoint's value of list channel ``channel``."""
        place = None if parent_id is None else self._fresh(key)
        record = None if place is None or parent_id is None else place.checkpoint(parent_id)
        if place is None or record is None:
            return None
        version = self._load(record.body).get("channel_versions", {}).get(channel)
        if version is None:
            return None
        value = Values(place, key, self._lists, self._load).value(channel, str(version))
        return Known(str(version), tuple(value)) if isinstance(value, list) else None

    # -- reading ---------------------------------------------------------------------
    def _get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread, ns, checkpoint_id = _where(config)
        key = (thread, ns)
        with self._places.lock(key):
            place = self._fresh(key)
            if place is None:
                return None
            wanted = checkpoint_id if checkpoint_id is not None else place.latest
            if wanted is None:
                return None
            record = place.checkpoint(wanted)
            if record is None:
                return None
            values = Values(place, key, self._lists, self._load, remember=True)
            return checkpoint_tuple(key, (wanted, record), values, self._load)

    def _list(
        self,
        config: RunnableConfig | None,
        wanted: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> builtins.list[CheckpointTuple]:
        only, before_id = _list_bounds(config, before)
        chosen: builtins.list[tuple[str, Key, Place]] = []
        for key in self._keys(config):
            with self._places.lock(key):
                place = self._fresh(key)
                ids = builtins.list(place.checkpoints) if place is not None else []
            if place is None:
                continue
            for checkpoint_id in ids:
                if (only is None or checkpoint_id == only) and (
                    before_id is None or checkpoint_id < before_id
                ):
                    chosen.append((checkpoint_id, key, place))
        # Newest first as text orders the ids: whatever they are, as list() in
        # LangGraph's savers orders them (SQL's ORDER BY checkpoint_id DESC).
        chosen.sort(key=lambda found: found[0], reverse=True)
        readers: dict[Key, Values] = {}
        found: builtins.list[CheckpointTuple] = []
        for checkpoint_id, key, place in chosen:
            record = place.checkpoint(checkpoint_id)
            if record is None or (wanted and not _matches(self._load(record.metadata), wanted)):
                continue  # a filter is checked before the values are read
            values = readers.setdefault(key, Values(place, key, self._lists, self._load))
            found.append(checkpoint_tuple(key, (checkpoint_id, record), values, self._load))
            if limit is not None and len(found) >= limit:
                break
        return found

    def _keys(self, config: RunnableConfig | None) -> builtins.list[Key]:
        """The places ``list`` looks in: a thread's namespace, a thread's, or all."""
        configurable = (config or {}).get("configurable") or {}
        if configurable.get("thread_id") is None:
            rows = self.store._exec(t.ALL_PLACES).rows
        else:
            thread, ns = check_ids(configurable["thread_id"], configurable.get("checkpoint_ns", ""))
            if "checkpoint_ns" in configurable:
                return [(thread, ns)]
            rows = self.store._exec(t.THREAD_PLACES, (thread,)).rows
        return [(str(thread), str(ns)) for thread, ns in rows]

    def _fresh(self, key: Key) -> Place | None:
        """Place ``key`` as stored: this saver's copy if its counts are the stored
        ones (one small read), else read whole; None if it has no row."""
        found = self.store._exec(t.PLACE_COUNTS, key).rows
        if not found:
            return None
        cached = self._places.get(key)
        if cached is not None and cached.counts == Counts(
            found[0][0], found[0][1], found[0][2] or 0
        ):
            return cached
        rows = self.store._exec(t.PLACE_ROWS, key).rows
        if not rows:
            return None
        stored = [
            StoredRow(rid, None if cid is None else id_text(cid), base, bytes(data))
            for *_, rid, cid, base, data in rows
            if rid is not None
        ]
        place = Place.read(Counts(rows[0][0], rows[0][1], 0), stored)[0]
        self._places.keep(key, place)
        return place

    def _coder(
        self,
    ) -> tuple[Callable[[tuple[str, bytes]], Any], Callable[[Any], tuple[str, bytes]]]:
        """How values are decoded and encoded, for a statement's work. (Not kept as
        an attribute: bound methods held by the saver would make it a reference
        cycle, and its cached threads would then wait for the cyclic collector.)"""
        return self._load, self._dump

    def _load(self, typed: tuple[str, bytes]) -> Any:
        try:
            return self.serde.loads_typed(typed)
        except NotImplementedError as exc:
            raise unknown_tag(typed[0]) from exc

    def _dump(self, value: Any) -> tuple[str, bytes]:
        if isinstance(value, BaseException):
            # A node's error, kept as a pending write: no secret it quotes is
            # stored (cairn.redaction), whatever the serde makes of it.
            value = redacted_error(value)
        kind, data = self.serde.dumps_typed(value)
        return kind, bytes(data)


class _Written(NamedTuple):
    """The row a write stored."""

    rid: int
    record: Record
    raw: bytes


def _open(store: Any) -> tuple[SQLStore, bool]:
    """The store to use, and whether the saver opened it (and so closes it)."""
    if isinstance(store, str):
        opened = open_store(store)
        assert isinstance(opened, SQLStore)  # every store open_store makes is one
        return opened, True
    if isinstance(store, SQLiteStore | PostgresStore):
        return store, False
    raise NotACairnStore(
        f"CairnSaver needs a cairn store, not {type(store).__module__}."
        f"{type(store).__qualname__}. Pass a store URL (CairnSaver('sqlite:///agent.db'), "
        "CairnSaver('postgresql://…')) or an open cairn store (app.store, "
        "cairn.store.open_store(url)). Nothing was written."
    )


def _where(config: RunnableConfig) -> tuple[str, str, str | None]:
    """Thread id, namespace and checkpoint id (if any) of ``config``, checked."""
    configurable = config.get("configurable") or {}
    thread, ns = check_ids(configurable.get("thread_id"), configurable.get("checkpoint_ns", ""))
    checkpoint_id = get_checkpoint_id(config)
    if checkpoint_id is not None:
        check_text("LangGraph checkpoint id", checkpoint_id)
    return thread, ns, checkpoint_id


def _matches(metadata: Any, wanted: dict[str, Any]) -> bool:
    return isinstance(metadata, dict) and all(metadata.get(k) == v for k, v in wanted.items())


def _list_bounds(
    config: RunnableConfig | None, before: RunnableConfig | None
) -> tuple[str | None, str | None]:
    """The checkpoint id ``list``'s config names, and the one it lists before."""
    only = get_checkpoint_id(config) if config is not None else None
    before_id = get_checkpoint_id(before) if before is not None else None
    return (
        None if only is None else check_text("LangGraph checkpoint id", only),
        None if before_id is None else check_text("LangGraph checkpoint id", before_id),
    )
