"""Format 1's ``CairnSaver``, frozen: the saver cairn shipped before format 3,
trimmed to what writes and reads a thread (no housekeeping, no async twins).

It writes the tables format 3 upgrades (``test_upgrade``), and it is the
format 1 contender of ``python -m bench --only langgraph``. Do not change it
to follow the saver in ``src``: it stands for the stores users already have.

The original module's docstring follows.

``CairnSaver``: a LangGraph checkpointer on a cairn store (SQLite or PostgreSQL).

Every statement runs through the store's own primitives (``_exec`` for a read,
``_atomically`` under ``_writing`` for a write), so the checkpointer gets what
cairn's engine gets: one connection per thread and the process's write lock on
SQLite, the pool with its reconnects on PostgreSQL, and every driver error
turned into a ``StoreError`` that says what to do. The tables are its own
(``cairn.integrations.langgraph._tables``).

What differs from LangGraph's savers is how a list channel is kept: as
appends (``cairn.integrations.langgraph._lists``), so a thread's storage grows
with its messages, not with its messages times its turns.
"""

from __future__ import annotations

import builtins
import random
from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from types import TracebackType
from typing import Any

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
from cairn.store import open_store
from cairn.store.postgres import PostgresStore
from cairn.store.sqlbase import SQLStore
from cairn.store.sqlcore import Tx
from cairn.store.sqlite import SQLiteStore
from tests.integration.langgraph.format1 import _tables as t
from tests.integration.langgraph.format1._lists import (
    Key,
    Known,
    ListCache,
    Stored,
    base_for,
    rebuild,
)
from tests.integration.langgraph.format1._packing import (
    CheckpointFormatError,
    check_format,
    check_ids,
    check_text,
    pack,
    unknown_tag,
    unpack,
)
from tests.integration.langgraph.format1._pinned import Pinned

Row = tuple[Any, ...]


class CairnSaver(BaseCheckpointSaver[str]):
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
        backend = self._backend

        def create(tx: Tx) -> None:
            if backend == "postgres":
                tx.exec(*t.PG_CREATE_LOCK)
            for statement in t.DDL[backend]:
                tx.exec(statement)
            rows = tx.exec(t.GET_FORMAT).rows
            if rows and int(rows[0][0]) > t.FORMAT:
                raise CheckpointFormatError(
                    f"the LangGraph tables in {self.store.identity} are in format "
                    f"{rows[0][0]}, written by a newer cairn (this one knows up to "
                    f"{t.FORMAT}). Upgrade cairn (`pip install -U 'cairn-durable[langgraph]'`). "
                    "Nothing was changed."
                )
            if not rows:
                tx.exec(t.SET_FORMAT, (str(t.FORMAT),))

        self._write(create)

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
        branch (the blob rows are keyed by it)."""
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
        blobs, lists = self._blob_rows(thread, ns, parent_id, checkpoint, new_versions)
        # Stored without its values (they are the blob rows) and its id (the key).
        body = {k: v for k, v in checkpoint.items() if k not in ("channel_values", "id")}
        kind, data = pack(self.serde.dumps_typed(body))
        meta = get_serializable_checkpoint_metadata(config, metadata)
        meta_kind, meta_data = pack(self.serde.dumps_typed(meta))
        row = (thread, ns, checkpoint_id, parent_id, kind, data, meta_kind, meta_data)

        def write(tx: Tx) -> None:
            tx.exec_many(t.INSERT_BLOB, [self._checked(tx, blob) for blob in blobs])
            tx.exec(t.UPSERT_CHECKPOINT, row)

        self._write(write)
        for key, version, items in lists:
            self._lists.remember(key, version, items)
        return {
            "configurable": {
                "thread_id": thread,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint_id,
            }
        }

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
        special = all(channel in WRITES_IDX_MAP for channel, _ in writes)
        statement = t.UPSERT_WRITE if special else t.INSERT_WRITE
        rows = [
            (
                thread,
                ns,
                checkpoint_id,
                task_id,
                WRITES_IDX_MAP.get(channel, idx),
                check_text("LangGraph channel name", channel),
                *pack(self.serde.dumps_typed(value)),
                task_path,
            )
            for idx, (channel, value) in enumerate(writes)
        ]
        self._write(lambda tx: tx.exec_many(statement, rows))

    def _write(self, work: Any) -> Any:
        with self.store._writing():
            return self.store._atomically(work)

    def _blob_rows(
        self,
        thread: str,
        ns: str,
        parent_id: str | None,
        checkpoint: Checkpoint,
        new_versions: ChannelVersions,
    ) -> tuple[builtins.list[_Blob], builtins.list[tuple[Key, str, builtins.list[Any]]]]:
        """The rows for the channels that changed, and the list values to remember."""
        values = checkpoint["channel_values"]
        blobs: builtins.list[_Blob] = []
        lists: builtins.list[tuple[Key, str, builtins.list[Any]]] = []
        for channel, raw_version in new_versions.items():
            check_text("LangGraph channel name", channel)
            version = str(raw_version)
            where = (thread, ns, channel, version)
            if channel not in values:
                continue  # a channel with a version and no row reads as empty
            value = values[channel]
            if not isinstance(value, list):
                blobs.append(_Blob(where, "value", None, self._dump(value), None))
                continue
            key = (thread, ns, channel)
            base = base_for(self._lists.get(key), value, partial(self._parent_list, key, parent_id))
            lists.append((key, version, value))
            if base is None:
                blobs.append(_Blob(where, "value", None, self._dump(value), None))
            elif base.version != version:
                appended = self._dump(value[len(base.items) :])
                blobs.append(_Blob(where, "append", base.version, appended, value))
        return blobs, lists

    def _checked(self, tx: Tx, blob: _Blob) -> Row:
        """The row to insert for ``blob``: an append only while its base is stored
        (another process may have deleted the thread since we cached it)."""
        if blob.kind == "append":
            thread, ns, channel, _ = blob.where
            if not tx.exec(t.ONE_BLOB, (thread, ns, channel, blob.base)).rows:
                return (*blob.where, "value", None, *self._dump(blob.whole))
        return (*blob.where, blob.kind, blob.base, *blob.typed)

    def _dump(self, value: Any) -> tuple[str, bytes]:
        return pack(self.serde.dumps_typed(value))

    def _parent_list(self, key: Key, parent_id: str | None) -> Known | None:
        """The parent checkpoint's value of list channel ``key``, read from the store."""
        thread, ns, channel = key
        if parent_id is None:
            return None
        rows = self.store._exec(t.ONE_CHECKPOINT, (thread, ns, parent_id)).rows
        if not rows:
            return None
        parent = self._load(rows[0][2], rows[0][3])
        version = parent.get("channel_versions", {}).get(channel)
        if version is None:
            return None
        value = _Reader(self, thread, ns).value(channel, str(version))
        return Known(str(version), tuple(value)) if isinstance(value, list) else None

    # -- reading ---------------------------------------------------------------------
    def _get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread, ns, checkpoint_id = _where(config)
        if checkpoint_id is None:
            rows = self.store._exec(t.LATEST_CHECKPOINT, (thread, ns)).rows
        else:
            rows = self.store._exec(t.ONE_CHECKPOINT, (thread, ns, checkpoint_id)).rows
        if not rows:
            return None
        reader = _Reader(self, thread, ns, remember=True)
        return self._tuple(thread, ns, rows[0], self._load(rows[0][4], rows[0][5]), reader)

    def _list(
        self,
        config: RunnableConfig | None,
        wanted: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> builtins.list[CheckpointTuple]:
        statement, params = _list_query(config, before, limit if not wanted else None)
        readers: dict[tuple[str, str], _Reader] = {}
        found: builtins.list[CheckpointTuple] = []
        for thread, ns, *row in self.store._exec(statement, params).rows:
            metadata = self._load(row[4], row[5])
            if wanted and not all(metadata.get(k) == v for k, v in wanted.items()):
                continue
            reader = readers.setdefault((thread, ns), _Reader(self, thread, ns))
            found.append(self._tuple(thread, ns, tuple(row), metadata, reader))
            if limit is not None and len(found) >= limit:
                break
        return found

    def _tuple(
        self, thread: str, ns: str, row: Row, metadata: Any, reader: _Reader
    ) -> CheckpointTuple:
        checkpoint_id, parent_id, kind, data = row[:4]
        checkpoint: Checkpoint = self._load(kind, data)
        checkpoint["id"] = checkpoint_id
        check_format(checkpoint, f"stored checkpoint {checkpoint_id!r} of thread {thread!r}")
        checkpoint["channel_values"] = reader.values(checkpoint["channel_versions"])
        writes = self.store._exec(t.PENDING_WRITES, (thread, ns, checkpoint_id)).rows
        return CheckpointTuple(
            config=_config(thread, ns, checkpoint_id),
            checkpoint=checkpoint,
            metadata=metadata,
            parent_config=_config(thread, ns, parent_id) if parent_id else None,
            pending_writes=[(task, channel, self._load(k, d)) for task, channel, k, d in writes],
        )

    def _load(self, kind: str, data: bytes | None) -> Any:
        typed = unpack(kind, data or b"")
        try:
            return self.serde.loads_typed(typed)
        except NotImplementedError as exc:
            raise unknown_tag(typed[0]) from exc


class _Blob:
    """One (channel, version) row to write; ``whole`` is a list append's full value,
    stored instead if its base turns out to be gone."""

    __slots__ = ("base", "kind", "typed", "where", "whole")

    def __init__(
        self,
        where: tuple[str, str, str, str],
        kind: str,
        base: str | None,
        typed: tuple[str | None, bytes | None],
        whole: list[Any] | None,
    ) -> None:
        self.where, self.kind, self.base, self.typed, self.whole = where, kind, base, typed, whole


class _Reader:
    """Channel values of one thread and namespace, each version decoded once."""

    def __init__(self, saver: CairnSaver, thread: str, ns: str, *, remember: bool = False) -> None:
        self._saver, self._thread, self._ns, self._remember = saver, thread, ns, remember
        self._channels: dict[str, dict[str, Stored]] = {}
        self._built: dict[str, dict[str, tuple[list[Any], int]]] = {}

    def values(self, versions: Mapping[str, Any]) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for channel, version in versions.items():
            value = self.value(channel, str(version))
            if value is not _ABSENT:
                found[channel] = value
        return found

    def value(self, channel: str, version: str) -> Any:
        """The value of ``channel`` at ``version``, ``_ABSENT`` if it has none."""
        key = (self._thread, self._ns, channel)
        known = self._saver._lists.get(key)
        if known is not None and known.version == version:
            return list(known.items)
        row = self._row(channel, version)
        if row is None or row.kind == "empty":
            return _ABSENT
        if row.kind == "value":
            return row.items
        if channel not in self._channels:
            self._channels[channel] = self._all(channel)
        value = rebuild(version, self._channels[channel], self._built.setdefault(channel, {}))
        if self._remember:
            self._saver._lists.remember(key, version, value)
        return value

    def _row(self, channel: str, version: str) -> Stored | None:
        if channel in self._channels:
            return self._channels[channel].get(version)
        where = (self._thread, self._ns, channel, version)
        rows = self._saver.store._exec(t.ONE_BLOB, where).rows
        return self._stored(rows[0]) if rows else None

    def _all(self, channel: str) -> dict[str, Stored]:
        rows = self._saver.store._exec(t.CHANNEL_BLOBS, (self._thread, self._ns, channel)).rows
        return {row[0]: self._stored(row) for row in rows}

    def _stored(self, row: Row) -> Stored:
        _, kind, base, value_kind, data = row
        if kind == "empty":
            return Stored(kind, None, None)
        if kind not in ("value", "append"):
            raise unknown_tag(kind)
        return Stored(kind, base, self._saver._load(value_kind, data))


_ABSENT: Any = object()


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


def _config(thread: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}
    }


def _list_query(
    config: RunnableConfig | None, before: RunnableConfig | None, limit: int | None
) -> tuple[str, list[Any]]:
    """``list``'s statement: fixed fragments for the arguments given, and their values."""
    where: list[str] = []
    params: list[Any] = []
    configurable = (config or {}).get("configurable") or {}
    if configurable.get("thread_id") is not None:
        thread, ns = check_ids(configurable["thread_id"], configurable.get("checkpoint_ns", ""))
        where.append(t.BY_THREAD)
        params.append(thread)
        if "checkpoint_ns" in configurable:
            where.append(t.BY_NAMESPACE)
            params.append(ns)
    if config is not None and (checkpoint_id := get_checkpoint_id(config)) is not None:
        where.append(t.BY_CHECKPOINT)
        params.append(check_text("LangGraph checkpoint id", checkpoint_id))
    if before is not None and (before_id := get_checkpoint_id(before)) is not None:
        where.append(t.BEFORE)
        params.append(check_text("LangGraph checkpoint id", before_id))
    statement = t.LIST_CHECKPOINTS
    if where:
        statement += " WHERE " + " AND ".join(where)
    statement += t.NEWEST_FIRST
    if limit is not None:
        statement += t.LIMIT
        params.append(int(limit))
    return statement, params
