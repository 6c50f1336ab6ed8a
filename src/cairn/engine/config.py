"""What the engine needs from an app, fixed when the app hands it work.

The engine never reaches into ``Cairn``: the app builds one ``EngineConfig``
(``Cairn.engine()``) and the claim path, ``execute``, batches and children read
everything from it. The config is frozen; the few things it holds that change on
their own (the registry of tasks, the codec cache) are the app's own objects,
shared by reference, so a task registered later is still found.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from cairn.blobs import BlobCodec, Offloader
from cairn.codec import Codec, codec_for
from cairn.engine.observer import Observer, no_observer
from cairn.errors import CodecError, TaskNotRegistered
from cairn.limits import LimitBook
from cairn.retry import Retry
from cairn.store.protocol import Store
from cairn.store.records import TaskRecord

if TYPE_CHECKING:
    from cairn.clock import Clock
    from cairn.engine.leases import LeaseKeeper
    from cairn.engine.run import FaultHook, TaskRun
    from cairn.task import TaskDef

ChangePolicy = Literal["fail", "rerun", "keep"]
"""What a replay does at an entry whose code changed since it was recorded
(docs/versions.md): stop with ``CodeChanged``, run it and every later step
again, or replay the recorded result and mark it kept."""
CHANGE_POLICIES: tuple[ChangePolicy, ...] = ("fail", "rerun", "keep")

MakeContext = Callable[["TaskRun"], Any]
"""Builds the ``ctx`` a task function receives, for one run (the app's
``Context``: the engine does not import the public layer above it)."""


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """One app's settings, store and registry, as the engine sees them."""

    store: Store
    clock: Clock
    # This process's owner id (cairn.engine.owners.current_owner).
    owner: str
    leases: LeaseKeeper
    # How long past its expiry another owner's lease is still honoured.
    takeover_grace: timedelta
    poll_interval: float
    task_retry: Retry
    step_retry: Retry
    # The codec new tasks (and spawned children) are recorded with.
    codec: Codec
    offloader: Offloader | None
    # The app's codec cache, by name (wrapped for the blob store when it has one).
    codecs: MutableMapping[str, Codec]
    tasks: Mapping[str, TaskDef[..., Any]]
    limits: LimitBook
    fault_hook: FaultHook
    make_context: MakeContext
    # Told of every batch, task run and call as it happens (cairn.engine.observer).
    observer: Observer = no_observer
    # The app's policy for a changed entry; a task's own (TaskDef.on_change) wins.
    on_change: ChangePolicy = "fail"
    # Whether on_change='rerun' may send a changed (and any later) ctx.llm_call again.
    rerun_models: bool = False
    # The app's version, recorded on each task it enqueues (None: no version).
    version: str | None = None
    # Whether the step writes (and once claims/records, conversation appends)
    # of this process's tasks that meet share one commit
    # (cairn.store.groupcommit); off: each commits alone; None: on where the
    # store's commit waits for the disk (groupcommit.groups_by_default).
    group_commit: bool | None = None

    def registered(self, name: str, *, task_id: str | None = None) -> TaskDef[..., Any]:
        """The task function registered as ``name``, or a clear error."""
        return task_named(self.tasks, name, task_id)

    def change_policy(self, task: TaskDef[..., Any]) -> tuple[ChangePolicy, bool]:
        """``task``'s ``on_change`` policy and ``rerun_models``: its own, or the app's."""
        policy = task.on_change or self.on_change
        models = self.rerun_models if task.rerun_models is None else task.rerun_models
        return policy, models

    def codec_named(self, name: str) -> Codec:
        """The codec a record was written with (``codec_named``)."""
        return codec_named(self.codecs, self.codec, self.offloader, name)

    def same_arguments(self, record: TaskRecord, args: str) -> bool:
        """Whether the recorded task's arguments equal ``args`` (encoded now)."""
        if record.args == args:
            return True
        # Equal values may encode differently (dict key order is kept on purpose).
        try:
            codec = self.codec_named(record.codec)
            return bool(codec.decode(record.args) == self.codec.decode(args))
        except CodecError:
            return False


def task_named(
    tasks: Mapping[str, TaskDef[..., Any]], name: str, task_id: str | None = None
) -> TaskDef[..., Any]:
    """The task function registered as ``name`` in ``tasks``, or a clear error."""
    task_def = tasks.get(name)
    if task_def is None:
        known = ", ".join(sorted(tasks)) or "none"
        raise TaskNotRegistered(
            f"no task function named {name!r} is registered on this app (registered: "
            f"{known}). Decorate it with @app.task, or run with the app that has it.",
            task_id=task_id,
        )
    return task_def


def codec_named(
    cache: MutableMapping[str, Codec], own: Codec, offloader: Offloader | None, name: str
) -> Codec:
    """The codec a record was written with: the app's own (``own``) or a built-in
    one, offloading large values to the blob store when there is one; kept in
    ``cache`` by name."""
    wrapped = cache.get(name)
    if wrapped is None:
        codec = own if name == own.name else codec_for(name)
        wrapped = codec if offloader is None else BlobCodec(codec, offloader)
        cache[name] = wrapped
    return wrapped
