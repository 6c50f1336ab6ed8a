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
* **Not only steps.** ``submit`` / ``asubmit`` queue the other fenced writes
  a task makes per entry: ``ctx.once``'s claim and record, and conversation
  messages (``stepbatch.WRITE_KINDS``); each is judged as a step is.
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
from typing import Any, NamedTuple

from cairn.store.records import StepRecord
from cairn.store.stepbatch import (
    STEP,
    Verdict,
    alone,
    alone_or_error,
    batch_writer,
    batches_multirow,
    leaders_for,
)

# The commit thread waits this long for work before it ends (a new one starts
# with the next async write): it never delays a write, it only lets an idle
# process keep no thread.
_IDLE_SECONDS = 2.0


class PendingStep:
    """One task's write, queued: what to write (a step row, or another of
    ``stepbatch.WRITE_KINDS``), and (once committed) its verdict: True
    (written), False (the fence moved) or the error to raise.

    A thread's write carries a ``gate``, a lock held until the write is settled
    or its thread is handed the lead; an async task's carries its loop and the
    future it awaits."""

    __slots__ = (
        "args", "fence", "first", "future", "gate", "kind", "loop", "step", "summoned", "verdict",
    )  # fmt: skip

    def __init__(
        self,
        step: StepRecord | None,
        fence: int,
        first: bool,
        loop: asyncio.AbstractEventLoop | None = None,
        future: asyncio.Future[Any] | None = None,
        kind: int = STEP,
        args: tuple[Any, ...] = (),
    ) -> None:
        self.kind = kind
        self.step = step
        self.args = args
        self.fence = fence
        self.first = first
        self.loop = loop
        self.future = future
        self.verdict: Verdict | None = None
        self.gate: threading.Lock | None = None
        self.summoned = False  # its thread was handed the lead (once at most)
        if loop is None:
            self.gate = threading.Lock()
            self.gate.acquire()

    def outcome(self) -> Any:
        verdict = self.verdict
        if isinstance(verdict, BaseException):
            raise verdict
        return verdict


class _Alone(NamedTuple):
    """A write that goes alone at once (nobody was committing): no gate, no future."""

    kind: int
    step: StepRecord | None
    args: tuple[Any, ...]
    fence: int
    first: bool


class Coalescer:
    """The queue of one store's step writes, and who commits it next.

    At most ``leaders`` commits run at once (``_leading`` counts them): one on
    SQLite, whose file has one writer at a time; up to the pool's size on
    PostgreSQL, whose connections commit in parallel. A lead passes straight
    from one committer to the next (see ``_hand_over``), so a queue is never
    left without someone to commit it."""

    def __init__(self, store: Any) -> None:
        self._store = store
        write = batch_writer(store)
        if write is None:
            raise TypeError(f"{type(store).__name__} cannot write a batch of steps")
        self._write = write
        self._max_leading = leaders_for(store)
        # Whether a write of several conversation messages may join a batch.
        self.multirow = batches_multirow(store)
        # The condition's own lock, taken directly where nobody waits on the
        # condition (a thread's write, a hand-over): ``with self._lock`` is a C
        # call, ``with self._cond`` a Python frame, and a lone task's step takes
        # it twice.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._queue: list[PendingStep] = []
        self._leading = 0
        self._helper_leads = False  # the commit thread holds one of the leads
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
        with self._lock:
            if self._leading < self._max_leading:
                self._leading += 1
                pending = None
            else:
                pending = PendingStep(step, fence, first)
                self._queue.append(pending)
        if pending is None:
            # Nobody is committing: this write goes alone, at once.
            try:
                return bool(self._store.record_step(step, fence, first=first))
            finally:
                self._hand_over()
        return bool(self._wait(pending))

    def submit(self, kind: int, args: tuple[Any, ...], fence: int, step: StepRecord | None) -> Any:
        """``record`` for a write of another kind (``stepbatch.WRITE_KINDS``):
        True, False (the fence moved), or what the store's own method returned
        when it ran alone (an ``OperationClaim`` for a claim)."""
        with self._lock:  # the condition's lock, as in ``record``
            if self._leading < self._max_leading:
                self._leading += 1
                pending = None
            else:
                pending = PendingStep(step, fence, False, kind=kind, args=args)
                self._queue.append(pending)
        if pending is None:
            # Nobody is committing: this write goes alone, at once (its error,
            # if any, is its caller's).
            try:
                return alone(self._store, _Alone(kind, step, args, fence, False))
            finally:
                self._hand_over()
        return self._wait(pending)

    def _wait(self, pending: PendingStep) -> Any:
        """A queued thread's write: wait until it is settled, leading a commit
        if the lead is handed to it."""
        assert pending.gate is not None
        pending.gate.acquire()  # released when it is settled, or handed the lead
        if pending.verdict is None:
            # We lead now: commit everything queued, ours among it (unless the
            # commit thread took it meanwhile: then we wait for its verdict).
            with self._cond:
                batch, self._queue = self._queue, []
            try:
                self._commit(batch)
            finally:
                self._hand_over()
            if pending.verdict is None:
                pending.gate.acquire()
        return pending.outcome()

    # -- an async task's write --------------------------------------------------------
    async def arecord(self, step: StepRecord, fence: int, first: bool) -> bool:
        """``record``, awaited: the commit runs on this store's commit thread (or
        a thread leading already), and the event loop runs other tasks meanwhile."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        self._enqueue(PendingStep(step, fence, first, loop, future))
        return await future

    async def asubmit(
        self, kind: int, args: tuple[Any, ...], fence: int, step: StepRecord | None
    ) -> Any:
        """``submit``, awaited (as ``arecord``)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._enqueue(PendingStep(step, fence, False, loop, future, kind, args))
        return await future

    def _enqueue(self, pending: PendingStep) -> None:
        """Queue an async task's write, and wake the commit thread if nobody leads."""
        with self._cond:
            self._queue.append(pending)
            if not self._helper_leads and self._leading < self._max_leading:
                self._leading += 1
                self._wake_helper()

    # -- committing ---------------------------------------------------------------------
    def _commit(self, batch: Sequence[PendingStep]) -> None:
        """Commit ``batch`` as one transaction and give each write its verdict.
        Whatever happens, every write in it is settled before this returns."""
        if len(batch) <= 1:
            # One write goes through the store's own path; none (a thread handed
            # the lead after the commit thread took its write) costs nothing.
            if batch:
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
        _settle_all(batch, verdicts)

    def _hand_over(self) -> None:
        """A thread's commit ended: pass the lead to a queued thread (it commits
        the queue), or to the commit thread when only async writes wait, or
        let it go when the queue is empty."""
        with self._lock:
            if not self._queue:
                # The common case, a lone task's write: nothing waits.
                self._leading -= 1
                return
            successor = next(
                (p for p in self._queue if p.gate is not None and not p.summoned), None
            )
            if successor is not None:
                successor.summoned = True
            elif self._queue and not self._helper_leads:
                self._wake_helper()
            else:
                self._leading -= 1  # nothing queued, or the commit thread drains it
        if successor is not None:
            assert successor.gate is not None
            successor.gate.release()

    # -- the commit thread, for async writes -------------------------------------------------
    def _wake_helper(self) -> None:
        """Hand the lead to the commit thread (held: ``_cond``)."""
        self._helper_leads = True
        self._helper_wanted = True
        if self._helper is None:
            self._helper = threading.Thread(
                target=_helper_main, args=(weakref.ref(self),), name="cairn-group-commit",
                daemon=True,
            )  # fmt: skip
            self._helper.start()
        else:
            self._cond.notify()

    def _helper_round(self) -> bool:
        """Wait for the lead, then commit the queue until it is empty; False
        when no lead came for ``_IDLE_SECONDS`` and the thread ends."""
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
                    self._helper_leads = False
                    self._leading -= 1
                    return True
            # Every write of the batch is settled, whatever _commit raises.
            with contextlib.suppress(BaseException):
                self._commit(batch)


def _helper_main(ref: weakref.ReferenceType[Coalescer]) -> None:
    """The commit thread: serves its coalescer while it exists and has work."""
    while True:
        coalescer = ref()
        if coalescer is None or not coalescer._helper_round():
            return
        del coalescer  # hold no reference while idle: a dropped store is freed


def _settle_solo(store: Any, pending: PendingStep) -> None:
    """One queued write alone: the store's own method for it."""
    _settle(pending, alone_or_error(store, pending))


def _settle(pending: PendingStep, verdict: Verdict) -> None:
    """Give ``pending`` its verdict, and wake its thread or its coroutine."""
    pending.verdict = verdict
    if pending.gate is not None:
        pending.gate.release()
    elif pending.loop is not None and pending.future is not None:
        # A closed event loop refuses it: nobody is waiting for it any more.
        with contextlib.suppress(RuntimeError):
            pending.loop.call_soon_threadsafe(_resolve, pending.future, verdict)


def _settle_all(batch: Sequence[PendingStep], verdicts: Sequence[Verdict]) -> None:
    """``_settle`` for a whole batch, waking each event loop once for all of its
    coroutines (one wake-up of a loop costs a system call)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Verdict]]] = {}
    for pending, verdict in zip(batch, verdicts, strict=True):
        pending.verdict = verdict
        if pending.gate is not None:
            pending.gate.release()
        elif pending.loop is not None and pending.future is not None:
            by_loop.setdefault(pending.loop, []).append((pending.future, verdict))
    for loop, answers in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting
            loop.call_soon_threadsafe(_resolve_many, answers)


def _resolve_many(answers: Sequence[tuple[asyncio.Future[Any], Verdict]]) -> None:
    for future, verdict in answers:
        _resolve(future, verdict)


def _resolve(future: asyncio.Future[Any], verdict: Verdict) -> None:
    if future.done():
        return  # the awaiting task was cancelled meanwhile
    if isinstance(verdict, BaseException):
        future.set_exception(verdict)
    else:
        future.set_result(verdict)


_CREATING = threading.Lock()


def groups_by_default(store: Any) -> bool:
    """Whether group commit is on when the app leaves it unsaid
    (``Cairn(group_commit=None)``): where a commit waits for the disk (SQLite
    ``synchronous=FULL``, PostgreSQL), sharing one pays many times over; on
    SQLite ``NORMAL`` a commit costs about what a step's own Python does, and
    the hand-over to the commit thread cost more than it saved (docs/benchmarks.md,
    "Group commit": 31% fewer steps a second for 100 async tasks)."""
    return getattr(store, "synchronous", None) != "NORMAL"


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
