"""Group commit: the step writes of many tasks of one process, in one transaction.

A store commits one transaction at a time per writer (SQLite: one per file), so
a process whose tasks each commit their own steps is capped at 1/commit-latency
steps a second however many tasks it runs. Here the tasks' step writes meet in
one queue per store, and whoever commits next commits everything queued:

* **Leader and followers, no timer.** A write that finds nobody committing
  commits at once, alone, through the store's own ``record_step`` (a lone task
  pays a lock and nothing else). A write that arrives while a commit is under
  way queues; when that commit ends, the queue is committed as one transaction
  (``cairn.store.stepbatch``), by a thread whose own write is queued, or by
  this store's commit thread when only async tasks are waiting.
* **Threads wait, coroutines await.** A thread's write waits on the queue's
  condition. An async task's write (``arecord``) awaits a future on its own
  event loop, and its commit runs on the commit thread, so the loop keeps
  running the other tasks (which then queue their writes behind it).
* **Each write is fenced on its own.** Every row is still the store's
  ``INSERT … SELECT … WHERE EXISTS`` fenced statement, and its own row count
  decides whether its task lost its lease; one task's error fails only that
  task's write (``cairn.store.stepbatch`` says how).
* **Nothing returns early.** A write returns (or its future resolves) only
  after the transaction holding it committed, with the store's configured
  durability (``synchronous``), so no step is reported done before its row is.

The queue is per store object, found by ``coalescer_for`` (docs/architecture.md,
"Group commit", says why it is built this way).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from cairn.store.records import StepRecord
from cairn.store.stepbatch import Verdict, batch_writer

# The commit thread waits this long for work before it ends (a new one starts
# with the next async write): it never delays a write, it only lets an idle
# process keep no thread.
_IDLE_SECONDS = 2.0


class PendingStep:
    """One task's step write, queued: what to write, and (once committed) its
    verdict: True (written), False (the fence moved) or the error to raise."""

    __slots__ = ("first", "fence", "future", "loop", "step", "verdict")

    def __init__(
        self,
        step: StepRecord,
        fence: int,
        first: bool,
        loop: asyncio.AbstractEventLoop | None = None,
        future: asyncio.Future[bool] | None = None,
    ) -> None:
        self.step = step
        self.fence = fence
        self.first = first
        self.loop = loop
        self.future = future
        self.verdict: Verdict | None = None

    def outcome(self) -> bool:
        verdict = self.verdict
        if isinstance(verdict, BaseException):
            raise verdict
        return bool(verdict)


class Coalescer:
    """The queue of one store's step writes, and who commits it next."""

    def __init__(self, store: Any) -> None:
        self._store = store
        write = batch_writer(store)
        if write is None:
            raise TypeError(f"{type(store).__name__} cannot write a batch of steps")
        self._write = write
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[PendingStep] = []
        self._leading = False  # a commit is under way (by a thread or the commit thread)
        self._helper: threading.Thread | None = None
        self._helper_wanted = False
        # How many transactions held more than one write, and how many writes
        # they held: read by the tests and the benchmark.
        self.batches = 0
        self.batched_writes = 0

    # -- a thread's write ---------------------------------------------------------
    def record(self, step: StepRecord, fence: int, first: bool) -> bool:
        """Write ``step`` under ``fence`` and return once it is committed: True,
        or False if the fence moved (the store's ``record_step`` contract)."""
        cond = self._cond
        with cond:
            if not self._leading:
                self._leading = True
                pending = None
            else:
                pending = PendingStep(step, fence, first)
                self._queue.append(pending)
                while pending.verdict is None and self._leading:
                    cond.wait()
                if pending.verdict is not None:
                    return pending.outcome()
                # The last commit ended without ours: we commit the queue now.
                self._leading = True
                batch, self._queue = self._queue, []
        if pending is None:
            try:
                return bool(self._store.record_step(step, fence, first=first))
            finally:
                self._hand_over()
        try:
            self._commit(batch)
        finally:
            self._hand_over()
        return pending.outcome()

    # -- an async task's write --------------------------------------------------------
    async def arecord(self, step: StepRecord, fence: int, first: bool) -> bool:
        """``record``, awaited: the commit runs on this store's commit thread,
        and the event loop runs other tasks meanwhile."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        pending = PendingStep(step, fence, first, loop, future)
        with self._cond:
            self._queue.append(pending)
            if not self._leading:
                self._leading = True
                self._wake_helper()
        return await future

    # -- committing ---------------------------------------------------------------------
    def _commit(self, batch: Sequence[PendingStep]) -> None:
        """Commit ``batch`` as one transaction and give each write its verdict.
        Whatever happens, every write in it is settled before this returns."""
        if len(batch) == 1:
            _settle_solo(self._store, batch[0])
            return
        self.batches += 1
        self.batched_writes += len(batch)
        try:
            verdicts = self._write(batch)
        except BaseException as exc:
            # The leader itself was interrupted (KeyboardInterrupt, or a bug):
            # nobody may wait forever, so every write is told; its task stops.
            for pending in batch:
                if pending.verdict is None:
                    _settle(pending, exc)
            raise
        for pending, verdict in zip(batch, verdicts, strict=True):
            _settle(pending, verdict)

    def _hand_over(self) -> None:
        """End this commit: wake the threads waiting for theirs, and make sure
        a queue left behind is committed next (by a queued thread, which the
        wake-up lets lead, or by the commit thread for async writes alone)."""
        with self._cond:
            self._leading = False
            if self._queue:
                if any(p.loop is None for p in self._queue):
                    pass  # a queued thread wakes below, finds nobody leading, and leads
                else:
                    self._leading = True
                    self._wake_helper()
            self._cond.notify_all()

    # -- the commit thread, for async writes -------------------------------------------------
    def _wake_helper(self) -> None:
        """Ask the commit thread to commit the queue (held: ``_cond``)."""
        self._helper_wanted = True
        if self._helper is None:
            self._helper = threading.Thread(
                target=_helper_main, args=(weakref.ref(self),), name="cairn-group-commit",
                daemon=True,
            )  # fmt: skip
            self._helper.start()
        else:
            self._cond.notify_all()

    def _helper_round(self) -> bool:
        """Commit the queue until it is empty (we lead already); False when
        there was nothing to do for ``_IDLE_SECONDS`` and the thread ends."""
        with self._cond:
            while not self._helper_wanted:
                if not self._cond.wait(_IDLE_SECONDS) and not self._helper_wanted:
                    self._helper = None
                    return False
            self._helper_wanted = False
        while True:
            with self._cond:
                batch, self._queue = self._queue, []
                if not batch:
                    self._leading = False
                    self._cond.notify_all()
                    return True
            # Every write of the batch is settled, whatever _commit raises.
            with contextlib.suppress(BaseException):
                self._commit(batch)
            with self._cond:
                self._cond.notify_all()  # threads whose writes were in it


def _helper_main(ref: weakref.ReferenceType[Coalescer]) -> None:
    """The commit thread: serves its coalescer while it exists and has work."""
    while True:
        coalescer = ref()
        if coalescer is None or not coalescer._helper_round():
            return
        del coalescer  # hold no reference while idle: a dropped store is freed


def _settle_solo(store: Any, pending: PendingStep) -> None:
    """One queued write alone: the store's own single-step write."""
    try:
        verdict: Verdict = bool(store.record_step(pending.step, pending.fence, first=pending.first))
    except BaseException as exc:  # noqa: BLE001 - the write's own error, handed to its task
        verdict = exc
    _settle(pending, verdict)


def _settle(pending: PendingStep, verdict: Verdict) -> None:
    """Give ``pending`` its verdict, and wake its coroutine if it has one (a
    thread's waiter is woken by ``_hand_over``)."""
    pending.verdict = verdict
    if pending.loop is not None and pending.future is not None:
        try:
            pending.loop.call_soon_threadsafe(_resolve, pending.future, verdict)
        except RuntimeError:
            pass  # its event loop has closed: nobody is waiting for it any more


def _resolve(future: asyncio.Future[bool], verdict: Verdict) -> None:
    if future.done():
        return  # the awaiting task was cancelled meanwhile
    if isinstance(verdict, BaseException):
        future.set_exception(verdict)
    else:
        future.set_result(verdict)


_CREATING = threading.Lock()


def coalescer_for(store: Any) -> Coalescer | None:
    """The group-commit queue of ``store`` (one per store object, kept on it),
    or None for a store that cannot batch step writes (not a SQL store, or a
    read-only one)."""
    found: Coalescer | None = getattr(store, "_group_commit", None)
    if found is not None:
        return found
    if batch_writer(store) is None or getattr(store, "read_only", False):
        return None
    with _CREATING:
        found = getattr(store, "_group_commit", None)
        if found is None:
            found = Coalescer(store)
            store._group_commit = found
    return found
