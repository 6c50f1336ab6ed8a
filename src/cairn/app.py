"""``Cairn``: the app a user creates, registers tasks on, and runs work with."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import sys
import threading
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any, Concatenate, ParamSpec, TypeVar, overload

from cairn.blobs import (
    DEFAULT_INLINE_LIMIT,
    BlobStore,
    Offloader,
    default_blobs_url,
    open_blobs,
)
from cairn.budgets import Budget, batch_scope
from cairn.callsite import CallSite, outside_caller
from cairn.clock import Clock, SystemClock
from cairn.codec import Codec, codec_for
from cairn.context import Context
from cairn.engine import batch as _batch
from cairn.engine.batch import BatchReport
from cairn.engine.claim import claim_task
from cairn.engine.config import ChangePolicy, EngineConfig, codec_named, task_named
from cairn.engine.execute import Outcome, aexecute, execute
from cairn.engine.leases import LeaseKeeper
from cairn.engine.observer import Observer, no_observer
from cairn.engine.owners import DEFAULT_LEASE_SECONDS, current_owner, takeover_grace
from cairn.engine.run import FaultHook, TaskRun, no_fault
from cairn.errors import (
    ConfigurationError,
    ResultTimeout,
    TaskArgumentsError,
    TaskBusy,
    TaskCancelled,
    TaskConflict,
    TaskFailed,
    TaskNotRegistered,
    TaskWaiting,
    UnknownTask,
)
from cairn.events import EventOptions, event_options, send_event
from cairn.gates import OnConflict
from cairn.limits import Limit, LimitBook, checked_limits
from cairn.names import check_name
from cairn.priority import check_priority
from cairn.progress import choose_progress
from cairn.redaction import read_environment, register_secret, shown_url
from cairn.retention import Retention, policies_of
from cairn.retry import NO_RETRY, Retry
from cairn.schedule import Catchup, Schedule, check_spec, fire_due, make_schedule
from cairn.signals import send_signal
from cairn.store import DEFAULT_URL, Store, check_store_url, creation_notice, open_store
from cairn.store.records import Gated, NewTask, TaskRecord
from cairn.store.sqlite import Synchronous
from cairn.task import TaskDef, check_task_function, checked_policy, derived_version, item_key, step

P = ParamSpec("P")
R = TypeVar("R")
ItemKey = Callable[[Mapping[str, Any]], str]


class Cairn:
    """A cairn app: a store plus the task functions it knows.

    ``Cairn()`` uses the store named by ``$CAIRN_STORE``, else a SQLite file at
    ``./.cairn/cairn.db``. The store is opened on first use, not at import.

    ``group_commit``: step writes (and ``ctx.once`` claims and records, and
    conversation message appends) of this process's tasks that arrive while
    another commit is under way share the next commit, each still fenced on its
    own, and none returns before its commit is durable (docs/architecture.md,
    "Group commit"). ``True`` turns it on, ``False`` commits each alone; the
    default (``None``) turns it on where a commit waits for the disk (SQLite
    with ``synchronous="FULL"``, PostgreSQL) and off on SQLite ``NORMAL``, where
    a commit is cheap and sharing it cost more than it saved.

    ``secrets``: values never to be stored or emitted (API keys, tokens,
    passwords of your own). cairn already keeps out the keys of the model
    clients it wraps and the values of credential-named environment variables
    (``OPENAI_API_KEY``...); each value given here is replaced by
    ``[redacted]`` in every error, log line, span, alert and export, and in
    recorded values, in this process (``cairn.redaction``; docs/values.md).

    ``retention``: how long finished tasks are kept, by status and batch name
    (``Retention(completed="30d", failed="90d")``, or several); this app's
    workers delete what is older, a small chunk at a time (``cairn.retention``;
    docs/workers.md).
    """

    def __init__(
        self,
        store: str | Store | None = None,
        *,
        codec: Codec | str = "json",
        task_retry: Retry | None = None,
        step_retry: Retry = NO_RETRY,
        lease: float = DEFAULT_LEASE_SECONDS,
        poll_interval: float = 1.0,
        synchronous: Synchronous = "NORMAL",
        clock: Clock | None = None,
        blobs: str | BlobStore | None = None,
        inline_limit: int = DEFAULT_INLINE_LIMIT,
        limits: Mapping[str, Limit] | None = None,
        on_change: ChangePolicy = "fail",
        rerun_models: bool = False,
        version: str | None = None,
        group_commit: bool | None = None,
        secrets: Iterable[str] = (),
        retention: Retention | Sequence[Retention] | None = None,
    ) -> None:
        register_secret(*secrets)
        read_environment(now=True)
        if isinstance(store, str):
            check_store_url(store)  # a malformed URL is refused here, not at first use
        self._store_arg = store
        self._synchronous = synchronous
        self._store: Store | None = None
        self._opened_at: CallSite | None = None
        self._store_lock = threading.Lock()
        self.codec = codec_for(codec, trust_pickle=True) if isinstance(codec, str) else codec
        self.task_retry = task_retry or Retry()
        self.step_retry = step_retry
        self.clock: Clock = clock or SystemClock()
        self.poll_interval = poll_interval
        self.owner = str(current_owner())
        self._lease = timedelta(seconds=lease)
        self._leases: LeaseKeeper | None = None
        self._tasks: dict[str, TaskDef[..., Any]] = {}
        self._schedules: dict[str, Schedule] = {}
        self.fault_hook: FaultHook = no_fault
        # Told of every batch, task run and call (cairn.engine.observer); live
        # tracing sets it (cairn.observe.live.trace_live).
        self.observer: Observer = no_observer
        self._blobs_arg = blobs
        self._inline_limit = inline_limit
        self._offloader: Offloader | None = None
        self._offloading: dict[str, Codec] = {}
        # Shared limits steps may name (limit=): held across every process on the store.
        self.limits: Mapping[str, Limit] = checked_limits(limits)
        # What a replay does at a step whose code changed (docs/versions.md).
        self.on_change: ChangePolicy = checked_policy(on_change, "Cairn") or "fail"
        # Whether on_change='rerun' may send a ctx.llm_call again (it costs money).
        self.rerun_models = rerun_models
        self._version = None if version is None else check_name("version", version)
        # Whether tasks' step writes that meet share one commit (docs/architecture.md).
        self.group_commit = group_commit
        # How long finished tasks are kept; applied by workers (cairn.retention).
        self.retention: tuple[Retention, ...] = policies_of(retention)

    # -- the store -----------------------------------------------------------------
    @property
    def store_url(self) -> str:
        if isinstance(self._store_arg, str):
            return self._store_arg
        if self._store_arg is not None:
            return self._store_arg.url
        return os.environ.get("CAIRN_STORE") or DEFAULT_URL

    def use_store(self, url: str) -> None:
        """Point the app at another store before it opens one (``cairn worker
        --store``); after the store is open this is an error."""
        with self._store_lock:
            if self._store is not None:
                raise ConfigurationError(_already_open(self._opened_at))
            check_store_url(url)
            self._store_arg = url
            self._offloader = None  # the default blob store sits beside the store
            self._offloading.clear()

    def task_names(self) -> list[str]:
        """The names of the task functions registered on this app."""
        return sorted(self._tasks)

    @property
    def store(self) -> Store:
        with self._store_lock:
            if self._store is None:
                # Kept to name the cause if use_store() comes too late.
                self._opened_at = outside_caller()
                if self._store_arg is None or isinstance(self._store_arg, str):
                    self._store = open_store(self.store_url, synchronous=self._synchronous)
                    defaulted = self._store_arg is None and not os.environ.get("CAIRN_STORE")
                    for line in creation_notice(self._store, defaulted=defaulted):
                        print(line, file=sys.stderr)  # which store: the first thing to check
                else:
                    self._store = self._store_arg
                # A round trip silent past a third of the lease (the heartbeat's
                # cadence) is abandoned and retried on a new connection, so the
                # heartbeat learns of a dead connection before its lease lapses.
                self._store.bound_round_trips(self._lease.total_seconds() / 3)
            return self._store

    def limit_book(self) -> LimitBook:
        """The app's limits, with the owner and lease its permits are held under."""
        return LimitBook(self.limits, self.owner, self._lease)

    @property
    def leases(self) -> LeaseKeeper:
        if self._leases is None:
            self._leases = LeaseKeeper(self.store, self.clock, self.owner, self._lease)
        return self._leases

    @property
    def takeover_grace(self) -> timedelta:
        """How long past its expiry this app still honours another owner's lease
        before taking its task over (``ownership.takeover_grace``)."""
        return takeover_grace(self._lease)

    def close(self) -> None:
        """Close the store's connections."""
        if self._leases is not None:
            self._leases.stop()
            self._leases = None
        if self._store is not None:
            self._store.close()
            self._store = None

    def __enter__(self) -> Cairn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def version(self) -> str:
        """The version each task this app enqueues records: the one given, or
        one derived from its task functions' code (``derived_version``)."""
        return self._version or derived_version(self._tasks)

    # -- registering ---------------------------------------------------------------
    @overload
    def task(self, fn: Callable[Concatenate[Context, P], R]) -> TaskDef[P, R]: ...

    @overload
    def task(
        self,
        *,
        name: str | None = None,
        retry: Retry | None = None,
        max_duration: float | timedelta | None = None,
        on_change: ChangePolicy | None = None,
        rerun_models: bool | None = None,
        budget: Budget | None = None,
    ) -> Callable[[Callable[Concatenate[Context, P], R]], TaskDef[P, R]]: ...

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        retry: Retry | None = None,
        max_duration: float | timedelta | None = None,
        on_change: ChangePolicy | None = None,
        rerun_models: bool | None = None,
        budget: Budget | None = None,
    ) -> Any:
        """Register a task function. Its name (default: the function's name) is
        what the store records, so keep it stable across deploys.

        ``max_duration`` (seconds or a timedelta, counted from the task's first
        start): past it, the task stops at its next step boundary and fails with
        ``TimeLimitExceeded``, which no retry policy retries. ``on_change``
        overrides the app's policy for a step whose code changed while the task
        was in flight, ``rerun_models`` whether ``rerun`` may send a
        ``ctx.llm_call`` again (docs/versions.md). ``budget`` caps what its model
        calls spend, its children's and every attempt's included (docs/budgets.md)."""
        limit = _positive_seconds(max_duration, "max_duration")
        _check_budget(budget)
        policy = checked_policy(on_change, f"task {name or getattr(fn, '__name__', '')!r}")

        def register(func: Callable[..., Any]) -> TaskDef[..., Any]:
            task_def = TaskDef(
                name=name or func.__name__,
                fn=func,
                retry=retry,
                max_duration=limit,
                on_change=policy,
                rerun_models=rerun_models,
                budget=budget,
            )
            check_name("task name", task_def.name)
            check_task_function(task_def.name, func)
            existing = self._tasks.get(task_def.name)
            if existing is not None and existing.fn is not func:
                raise TaskConflict(
                    f"two task functions are registered as {task_def.name!r}: "
                    f"{existing.fn.__module__}.{existing.fn.__qualname__} and "
                    f"{func.__module__}.{func.__qualname__}. Give one a name= of its own."
                )
            self._tasks[task_def.name] = task_def
            return task_def

        return register if fn is None else register(fn)

    def registered(self, name: str, *, task_id: str | None = None) -> TaskDef[..., Any]:
        """The task function registered as ``name``."""
        return task_named(self._tasks, name, task_id)

    def engine(self) -> EngineConfig:
        """What the engine needs from this app, fixed for the work it hands over
        now (the store is opened if it is not yet)."""
        return EngineConfig(
            store=self.store,
            clock=self.clock,
            owner=self.owner,
            leases=self.leases,
            takeover_grace=self.takeover_grace,
            poll_interval=self.poll_interval,
            task_retry=self.task_retry,
            step_retry=self.step_retry,
            codec=self.codec,
            offloader=self.offloader,
            codecs=self._offloading,
            tasks=MappingProxyType(self._tasks),
            limits=self.limit_book(),
            fault_hook=self.fault_hook,
            make_context=self._context_for,
            observer=self.observer,
            on_change=self.on_change,
            rerun_models=self.rerun_models,
            version=self.version,
            group_commit=self.group_commit,
        )

    def _context_for(self, run: TaskRun) -> Context:
        return Context(run, self.step_retry, self)

    def _definition(self, task: TaskDef[..., Any] | Callable[..., Any]) -> TaskDef[..., Any]:
        if isinstance(task, TaskDef):
            mine = self._tasks.get(task.name)
            if mine is task:
                return task
        name = getattr(task, "name", getattr(task, "__name__", repr(task)))
        raise TaskNotRegistered(
            f"{name!r} is not a task registered on this app. Decorate it with @app.task "
            "(on this Cairn instance) and pass the decorated function."
        )

    def schedule(
        self,
        cron: str,
        *,
        tz: str = "UTC",
        catchup: Catchup = "latest",
        name: str | None = None,
    ) -> Callable[[TaskDef[P, R]], TaskDef[P, R]]:
        """Run a task at the times ``cron`` names, read in the time zone ``tz``.

        Goes above ``@app.task``; the task takes the firing time as ``fired_at``.
        Workers create each firing once, as a task with id
        ``schedule:NAME/<time in UTC>``. Firings missed while no worker ran:
        ``catchup="latest"`` runs the most recent one, ``"all"`` every one,
        ``"none"`` none. ``name`` (default: the task's) is what the store records.
        Needs ``pip install 'cairn-durable[schedule]'``.
        """
        check_spec(cron, tz, catchup)

        def register(task: TaskDef[P, R]) -> TaskDef[P, R]:
            made = make_schedule(task, cron, tz, catchup, name)
            self._definition(made.task)
            if made.name in self._schedules:
                raise ConfigurationError(
                    f"two schedules are named {made.name!r}; give each of a task's "
                    "schedules a name= of its own"
                )
            self._schedules[made.name] = made
            return task

        return register

    def schedules(self) -> list[Schedule]:
        """The schedules registered on this app, by name."""
        return [self._schedules[name] for name in sorted(self._schedules)]

    def fire_due_schedules(self) -> list[str]:
        """Create every scheduled firing due now (by this app's clock) and return
        the ids of the tasks created; workers do this on their own. Safe to call
        from many processes at once: each firing is created once."""
        return fire_due(self, self.schedules(), self.clock.now())

    @overload
    def step(self, fn: Callable[P, R]) -> Callable[P, R]: ...

    @overload
    def step(
        self, *, name: str | None = None, retry: Retry | None = None, limit: str | None = None
    ) -> Callable[[Callable[P, R]], Callable[P, R]]: ...

    def step(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        retry: Retry | None = None,
        limit: str | None = None,
    ) -> Any:
        """Declare a step once; calling it inside a task checkpoints it (``cairn.step``)."""
        if limit is not None:
            self.limit_book().get(limit)  # an unknown name fails where it is declared
        if fn is None:
            return step(name=name, retry=retry, limit=limit)
        return step(name=name, retry=retry, limit=limit)(fn)

    # -- one task ---------------------------------------------------------------------
    @overload
    def run(
        self,
        task: TaskDef[..., Coroutine[Any, Any, R]],
        /,
        *,
        task_id: str | None = None,
        **kwargs: Any,
    ) -> R: ...

    @overload
    def run(self, task: TaskDef[..., R], /, *, task_id: str | None = None, **kwargs: Any) -> R: ...

    def run(self, task: TaskDef[..., Any], /, *, task_id: str | None = None, **kwargs: Any) -> Any:
        """Run one task now and return its result.

        Running it again with the same ``task_id`` resumes it, or returns the
        recorded result if it finished; it never starts a second copy.
        """
        task_def = self._definition(task)
        engine = self.engine()
        record = self._start(engine, task_def, task_id, kwargs)
        if record.status != "running":
            return self._recorded_result(record)
        if task_def.is_async:
            return asyncio.run(self._arun_claimed(engine, record))
        return self._outcome_result(execute(engine, record), record)

    async def arun(
        self, task: TaskDef[..., Any], /, *, task_id: str | None = None, **kwargs: Any
    ) -> Any:
        """``run`` for callers already inside an event loop."""
        task_def = self._definition(task)
        engine = self.engine()
        record = self._start(engine, task_def, task_id, kwargs)
        if record.status != "running":
            return self._recorded_result(record)
        if not task_def.is_async:
            return await asyncio.to_thread(self._run_claimed_sync, engine, record)
        return await self._arun_claimed(engine, record)

    def _run_claimed_sync(self, engine: EngineConfig, record: TaskRecord) -> Any:
        return self._outcome_result(execute(engine, record), record)

    async def _arun_claimed(self, engine: EngineConfig, record: TaskRecord) -> Any:
        return self._outcome_result(await aexecute(engine, record), record)

    def _start(
        self,
        engine: EngineConfig,
        task_def: TaskDef[..., Any],
        task_id: str | None,
        kwargs: Mapping[str, Any],
    ) -> TaskRecord:
        """Create the task if new, then claim it; or return it if it finished."""
        args = task_def.encode_arguments(self.codec, kwargs)
        key = item_key(kwargs)
        tid = task_id or (f"{task_def.name}/{key}" if key else task_def.name)
        # A task_id given as "" is refused, not replaced by the default.
        check_name("task id", task_id if task_id is not None else tid)
        now = self.clock.now()
        new = NewTask(tid, task_def.name, args, self.codec.name, version=engine.version)
        engine.store.create_task(new, now)
        record = engine.store.get_task(tid)
        assert record is not None  # just created or already there
        if record.name != task_def.name or not engine.same_arguments(record, args):
            raise TaskConflict(
                f"task id {tid!r} already belongs to task {record.name!r} with arguments "
                f"{record.args}; it was now asked for {task_def.name!r} with {args}. Use "
                "another task_id for different work.",
                task_id=tid,
            )
        if record.status in ("completed", "failed", "cancelled"):
            return record
        if record.status == "waiting" and not _due(record, now):
            return record
        claimed = claim_task(engine, record)
        if claimed is None:
            raise self._busy(record)
        return claimed

    def _busy(self, record: TaskRecord) -> TaskBusy:
        """Why ``record`` could not be claimed now, and when it could be."""
        tid = record.id
        latest = self.store.get_task(tid) or record
        if latest.status != "running" or latest.fence != record.fence:
            return TaskBusy(f"task {tid!r} was claimed by another process just now", task_id=tid)
        where = "this process" if latest.owner == self.owner else "another live process"
        message = (
            f"task {tid!r} is running in {where} ({latest.owner}); cairn will not start a "
            "second copy."
        )
        if latest.owner != self.owner and latest.lease_expires_at is not None:
            free = latest.lease_expires_at + self.takeover_grace
            message += (
                f" If that process is stopped or cut off, its task may be taken over from "
                f"{free.isoformat(timespec='seconds')} (its lease, then a grace of "
                f"{self.takeover_grace.total_seconds():.0f}s in case it is only cut off from "
                "the store); app.result() waits for it to end."
            )
        else:
            message += " Wait for it (app.result() waits), or stop that process."
        return TaskBusy(message, task_id=tid)

    def _awaited(self, task_id: str) -> str | None:
        """The signal a waiting task waits for, from its history."""
        history = self.store.load_history(task_id)
        return next((r.name for _, r in sorted(history.items()) if r.status == "waiting"), None)

    def codec_named(self, name: str) -> Codec:
        """The codec a record was written with (``EngineConfig.codec_named``)."""
        return codec_named(self._offloading, self.codec, self.offloader, name)

    @property
    def blobs(self) -> BlobStore | None:
        """Where values above ``inline_limit`` go: the ``blobs=`` given, else
        ``$CAIRN_BLOBS``, else a directory beside a SQLite store (None otherwise)."""
        offloader = self.offloader
        return None if offloader is None else offloader.blobs

    @property
    def offloader(self) -> Offloader | None:
        if self._offloader is None:
            arg = self._blobs_arg
            if arg is None:
                arg = default_blobs_url(self.store_url)
            if arg is None:
                return None
            blobs = open_blobs(arg) if isinstance(arg, str) else arg
            self._offloader = Offloader(blobs, self._inline_limit)
        return self._offloader

    def _outcome_result(self, outcome: Outcome, record: TaskRecord) -> Any:
        if outcome.status == "completed":
            return outcome.result
        if outcome.status == "cancelled":
            raise TaskCancelled(f"task {record.id!r} was cancelled", task_id=record.id)
        if outcome.status == "waiting":
            raise _waiting(record.id, getattr(outcome.error, "waiting_for", None))
        assert outcome.error is not None
        if outcome.status == "lost":
            raise outcome.error
        stored = self.store.get_task(record.id) or record
        raise _failed(record.id, stored.error, stored.attempts - stored.retry_base) from (
            outcome.error
        )

    # -- waiting for a task that runs elsewhere -------------------------------------------
    def result(self, task_id: str, *, timeout: float | None = None) -> Any:
        """Wait for task ``task_id`` to end, wherever it runs, and return its result,
        or raise its error (``TaskFailed``, ``TaskCancelled``).

        For a task another process runs (a worker, another ``app.run``), where
        ``app.run`` would raise ``TaskBusy``. A pending or waiting task is waited
        for too: something else must run it. The store is read every
        ``poll_interval`` seconds; past ``timeout`` seconds (None: no limit)
        ``ResultTimeout`` is raised and nothing changes. ``UnknownTask`` for an
        id the store does not hold."""
        deadline = self._deadline(timeout)
        while True:
            record = self._finished_or_none(task_id, deadline, timeout)
            if record is not None:
                return self._recorded_result(record)
            self.clock.sleep(self._next_look(deadline))

    async def aresult(self, task_id: str, *, timeout: float | None = None) -> Any:
        """``result`` for callers inside an event loop."""
        deadline = self._deadline(timeout)
        while True:
            record = self._finished_or_none(task_id, deadline, timeout)
            if record is not None:
                return self._recorded_result(record)
            await self.clock.asleep(self._next_look(deadline))

    def _deadline(self, timeout: float | None) -> float | None:
        if timeout is not None and not timeout >= 0:  # also refuses NaN
            raise ValueError(f"timeout must be zero or positive seconds, not {timeout}")
        return None if timeout is None else self.clock.monotonic() + timeout

    def _finished_or_none(
        self, task_id: str, deadline: float | None, timeout: float | None
    ) -> TaskRecord | None:
        record = self.store.get_task(task_id)
        if record is None:
            raise UnknownTask(
                f"no task {task_id!r} in the store at {shown_url(self.store_url)}", task_id=task_id
            )
        if record.status in ("completed", "failed", "cancelled"):
            return record
        if deadline is not None and self.clock.monotonic() >= deadline:
            raise ResultTimeout(
                f"task {task_id!r} is still {record.status} after {timeout:g}s of waiting"
                f"{f' (owner {record.owner})' if record.owner else ''}; nothing was "
                "changed. Wait longer, or look with `cairn show`.",
                task_id=task_id,
            )
        return None

    def _next_look(self, deadline: float | None) -> float:
        if deadline is None:
            return self.poll_interval
        return max(0.0, min(self.poll_interval, deadline - self.clock.monotonic()))

    def _recorded_result(self, record: TaskRecord) -> Any:
        if record.status == "waiting":
            raise _waiting(record.id, self._awaited(record.id))
        if record.status == "completed":
            return self.codec_named(record.codec).decode(record.result or "null")
        if record.status == "cancelled":
            raise TaskCancelled(f"task {record.id!r} was cancelled", task_id=record.id)
        attempts, hint = record.attempts - record.retry_base, _how_to_run_anew(record.id, self)
        raise _failed(record.id, record.error, attempts, hint)

    # -- signals ------------------------------------------------------------------------
    def signal(self, task_id: str, name: str, payload: Any = None) -> bool:
        """Send signal ``name`` with ``payload`` to a task: its ``ctx.wait_for(name)``
        returns it, whether the task waits already or gets there later. A waiting
        task is woken (a worker, or running it again, takes it up).

        Returns False if that signal was sent to the task before (the first one
        stands). Raises ``UnknownTask`` for an unknown id, and ``TaskError`` for
        a task that has ended."""
        return send_signal(self.store, task_id, name, payload, self.clock.now())

    # -- batches ------------------------------------------------------------------------
    def enqueue(
        self,
        batch: str,
        task: TaskDef[..., Any],
        items: Iterable[Mapping[str, Any]],
        *,
        key: ItemKey | None = None,
        budget: Budget | None = None,
        priority: int = 0,
        debounce: float | timedelta | None = None,
        singleton: str | None = None,
        on_conflict: OnConflict = "drop",
    ) -> int:
        """Add one task per item to ``batch``; an item key already there is skipped.

        A list is checked whole before anything is written; an iterator is
        streamed in chunks (each chunk checked before it is written), so a huge
        batch never sits in memory. ``budget`` caps what the batch's model calls
        spend (docs/budgets.md); given again, it leaves the budget as it stands
        (a raise stays raised). Workers claim tasks of a higher ``priority``
        first (docs/workers.md); a task already there keeps its own.

        With ``debounce`` or ``singleton``, each item is an event (``submit``),
        sent in order; the answer counts the tasks made (new or queued).
        """
        options = event_options(debounce, singleton, on_conflict)
        new_task = self._task_maker(batch, task, key, priority)
        _check_budget(budget)
        now = self.clock.now()
        if budget is not None:
            self.store.declare_budget(
                batch_scope(batch), budget.usd_nanos, budget.tokens, budget.warn, now
            )
        tasks: Iterable[NewTask]
        if isinstance(items, Sequence):
            tasks = [new_task(index, item) for index, item in enumerate(items)]
        else:
            tasks = (new_task(index, item) for index, item in enumerate(items))
        if options is not None:
            return sum(self._send(task, options).outcome in ("new", "queued") for task in tasks)
        return self.store.enqueue(tasks, now)

    def submit(
        self,
        batch: str,
        task: TaskDef[..., Any],
        item: Mapping[str, Any],
        *,
        key: ItemKey | None = None,
        priority: int = 0,
        debounce: float | timedelta | None = None,
        singleton: str | None = None,
        on_conflict: OnConflict = "drop",
    ) -> Gated:
        """Send one item to ``batch`` as an event, and say which task carries it.

        ``debounce`` (seconds): the task of the item's key (``key``, as in
        ``enqueue``) runs once no event of that key came for that long, with
        the last event's arguments. ``singleton``: at most one task of that key
        is pending, running or waiting; another is dropped (``on_conflict=
        "drop"``: the answer names the holder) or waits behind it (``"queue"``).
        docs/debounce.md says exactly how.
        """
        options = event_options(debounce, singleton, on_conflict)
        if options is None:
            raise ConfigurationError(
                "submit needs debounce= or singleton=; for a plain task use enqueue"
            )
        new_task = self._task_maker(batch, task, key, priority)
        return self._send(new_task(0, item), options)

    def _task_maker(
        self, batch: str, task: TaskDef[..., Any], key: ItemKey | None, priority: int
    ) -> Callable[[int, Mapping[str, Any]], NewTask]:
        """Checks ``batch`` and ``task``; the maker of a new task of each item."""
        task_def = self._definition(task)
        check_name("batch name", batch)
        check_priority(priority)
        existing = self.store.batch_task_name(batch)
        if existing is not None and existing != task_def.name:
            raise TaskConflict(
                f"batch {batch!r} runs task {existing!r}, not {task_def.name!r}. Use "
                "another batch name."
            )
        version = self.version

        def new_task(index: int, item: Mapping[str, Any]) -> NewTask:
            _check_item(task_def, index, item)
            args = task_def.encode_arguments(self.codec, item)
            ikey = key(item) if key is not None else item_key(item)
            tid = check_name("task id", f"{batch}/{ikey}")
            return NewTask(
                tid,
                task_def.name,
                args,
                self.codec.name,
                batch,
                ikey,
                version=version,
                priority=priority,
            )

        return new_task

    def _send(self, task: NewTask, options: EventOptions) -> Gated:
        return send_event(self.store, task, options, self.clock.now())

    def run_batch(
        self,
        batch: str,
        task: TaskDef[..., Any],
        items: Iterable[Mapping[str, Any]] = (),
        *,
        concurrency: int = 4,
        key: ItemKey | None = None,
        progress: bool | None = None,
        budget: Budget | None = None,
        priority: int = 0,
    ) -> BatchReport:
        """Enqueue ``items`` into ``batch`` and run every unfinished task of it.

        Running the same call again after a crash runs only what is unfinished.
        ``progress``: a live bar on a terminal and log lines otherwise (None),
        always a bar (True), or nothing (False).
        """
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        task_def = self._definition(task)
        self.enqueue(batch, task_def, items, key=key, budget=budget, priority=priority)
        shown = choose_progress(progress)
        if task_def.is_async:
            return asyncio.run(_batch.run_async(self.engine(), batch, concurrency, shown))
        return _batch.run_sync(self.engine(), batch, concurrency, shown)

    async def arun_batch(
        self,
        batch: str,
        task: TaskDef[..., Any],
        items: Iterable[Mapping[str, Any]] = (),
        *,
        concurrency: int = 4,
        key: ItemKey | None = None,
        progress: bool | None = None,
        budget: Budget | None = None,
        priority: int = 0,
    ) -> BatchReport:
        """``run_batch`` for async tasks, from inside an event loop."""
        task_def = self._definition(task)
        if not task_def.is_async:
            raise TaskConflict(f"task {task_def.name!r} is not async; use run_batch for sync tasks")
        self.enqueue(batch, task_def, items, key=key, budget=budget, priority=priority)
        return await _batch.run_async(self.engine(), batch, concurrency, choose_progress(progress))


def _check_item(task_def: TaskDef[..., Any], index: int, item: object) -> None:
    """Refuse an item that is not a mapping of argument names to values, by its index."""
    if isinstance(item, Mapping):
        return
    shown = repr(item)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    raise TaskArgumentsError(
        f"item {index} of the items for task {task_def.name!r} is {shown} "
        f"({type(item).__name__}), not a mapping of argument names to values. Write each "
        "item as a dict of the task's arguments after ctx, for example "
        '[{"app_id": "a1"}, {"app_id": "a2"}].'
    )


def _check_budget(budget: object) -> None:
    if budget is not None and not isinstance(budget, Budget):
        raise ConfigurationError(
            f"budget= must be a cairn.Budget(usd=..., tokens=...), not {budget!r}"
        )


def _positive_seconds(value: float | timedelta | None, what: str) -> float | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds <= 0:
        raise ValueError(f"{what} must be a positive number of seconds, not {seconds:g}")
    return seconds


def _due(record: TaskRecord, now: datetime) -> bool:
    return record.wake_at is not None and record.wake_at <= now


def _waiting(task_id: str, awaited: str | None) -> TaskWaiting:
    if awaited is None or awaited == "its children":
        return TaskWaiting(
            f"task {task_id!r} is waiting for its child tasks; no process holds it. Run "
            "it again (or let a worker) once they have finished.",
            task_id=task_id,
        )
    return TaskWaiting(
        f"task {task_id!r} is waiting for signal {awaited!r}; no process holds it. Send "
        f"it with `cairn signal {shlex.quote(task_id)} {shlex.quote(awaited)} 'JSON'` (or "
        "app.signal), then run the task again or let a worker take it up.",
        task_id=task_id,
        waiting_for=awaited,
    )


def _already_open(opened_at: CallSite | None) -> str:
    """Why use_store() came too late: what opened the store, and what to do."""
    if opened_at is None:
        return (
            "the app's store is already open; call use_store() before the app first "
            "runs, enqueues or reads anything"
        )
    if opened_at.importing is None:
        return (
            f"the app's store is already open: {opened_at} opened it. Call use_store() "
            "before that line."
        )
    return (
        f"the app's store is already open: module {opened_at.importing!r} opened it while "
        f"it was being imported ({opened_at.where}, at the module's top level), so "
        "importing the module runs its tasks. Put that run under "
        'if __name__ == "__main__": so that importing the module (as cairn worker, cairn '
        "check and cairn enqueue do) runs nothing and --store can choose the store."
    )


def _how_to_run_anew(task_id: str, app: Cairn) -> str:
    """What to do about a failure a run found recorded: it is not run again by
    itself, so say how to move it back to pending (the CLI line, and the call)."""
    store = shlex.quote(shown_url(app.store_url))
    command = f"cairn retry {shlex.quote(task_id)} --store {store}"
    return (
        "That failure is recorded: running the task again returns it and runs nothing. "
        f"To run the task anew (after a fix), move it back to pending with `{command}` (in "
        f"Python: app.store.retry_task({task_id!r}, app.clock.now())) and run it again; "
        "its completed steps are not run again."
    )


def _failed(task_id: str, error_json: str | None, attempts: int, hint: str = "") -> TaskFailed:
    error: dict[str, Any] = json.loads(error_json) if error_json else {}
    note = f" ({error['note']})" if error.get("note") else ""
    message = (
        f"task {task_id!r} failed after {attempts} attempt(s): "
        f"{error.get('type', '?')}: {error.get('message', '')}{note}"
    )
    if hint:
        message = f"{message.rstrip().rstrip('.')}. {hint}"
    return TaskFailed(message, task_id=task_id, error=error)
