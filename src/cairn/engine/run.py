"""One task as this process runs it, and the two drivers that run its machines.

``TaskRun`` holds the fence, the history and the position. Every write of the
task's history goes through it (``write``, ``start_attempt``, ``finish``, and
the operation and conversation writes; a completed step's record is ``write``
inline in ``steps._completed``), carrying the fence. A refused write
means the task is no longer ours: if it was cancelled we raise ``Cancelled``,
otherwise ``LeaseLost``. Either stops the task at once.

One engine for sync and async code: cairn's logic for a step, a recorded input
or a whole task is written once, as a generator (a *machine*). It never calls
user code or sleeps itself: it *yields* a ``Call`` or a ``Wait`` and receives
the outcome. ``drive`` performs effects synchronously; ``adrive`` awaits them.
Each driver is a dozen lines, so the two edges cannot drift apart the way
hand-kept twin engines do. Only ``Exception`` is thrown back into a machine;
``BaseException`` (lease lost, cancellation, KeyboardInterrupt) passes straight
through to the caller, after the machine is closed so its ``finally`` blocks run.

The drivers live beside ``TaskRun`` because every step passes through both: a
first-run step visits the context, ``steps``, this module and the store's
backend, nothing else (tests/integration/test_hot_path.py holds that).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, TypeVar

from cairn.blobs.offload import WARN_ABOVE, BlobCodec, Offloader, warn_if_large
from cairn.budgets import Budget
from cairn.clock import Clock
from cairn.codec import Codec, JsonCodec
from cairn.engine.errortext import describe_error
from cairn.engine.leases import LeaseKeeper
from cairn.engine.observer import Event, no_observer, notify
from cairn.errors import (
    BlobError,
    BlobStoreFull,
    CairnControl,
    CairnError,
    Cancelled,
    CodecError,
    InvalidName,
    LeaseLost,
    NestedStepError,
    NonDeterminismError,
    TimeLimitExceeded,
)
from cairn.limits import NO_LIMITS, LimitBook
from cairn.names import check_name
from cairn.redaction import redact_value
from cairn.store.groupcommit import Coalescer
from cairn.store.protocol import Store
from cairn.store.records import (
    MessageRecord,
    OperationClaim,
    OperationRecord,
    StepKind,
    StepRecord,
)
from cairn.store.stepbatch import CLAIM, MESSAGES, SETTLE

# A claim granted (the store's own answer for one, made once).
_CLAIMED = OperationClaim(claimed=True, record=None)

if TYPE_CHECKING:
    from cairn.engine.config import ChangePolicy, EngineConfig

T = TypeVar("T")


# NamedTuples, not frozen dataclasses: one is made per step, and a frozen
# dataclass's __init__ costs about a microsecond more on that path.
class Call(NamedTuple):
    """Call user code; the machine receives its return value or its exception.

    ``inside`` names the history entry whose work the call is, as (the task's
    run, a label): set while the call runs, so a ``ctx`` call from inside it (a
    step inside a step) is caught at once (``TaskRun.replayed``)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    inside: tuple[object, object] | None = None


# The entry whose function is running in this thread or coroutine, if any.
inside_call: ContextVar[tuple[object, object] | None] = ContextVar(
    "cairn_inside_call", default=None
)


class Wait(NamedTuple):
    """Wait this many seconds (retry backoff, durable sleep)."""

    seconds: float


class Persist(Call):
    """Write a history entry under the fence (``Call(TaskRun.write, (run, record))``).

    ``drive`` calls it like any call. ``adrive`` awaits ``TaskRun.awrite``
    instead, so while the write waits for its commit the event loop runs the
    process's other tasks, whose writes then share that commit or the next
    (group commit, ``cairn.store.groupcommit``)."""

    __slots__ = ()


Effect = Call | Wait
Machine = Generator[Effect, Any, T]


def in_event_loop() -> bool:
    """True when called from a coroutine (a running event loop in this thread):
    the sync-or-async question for calls that take no function to look at."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def drive(machine: Machine[T], clock: Clock) -> T:
    """Run ``machine`` to its end in the calling thread."""
    value: Any = None
    error: Exception | None = None
    while True:
        try:
            effect = machine.send(value) if error is None else machine.throw(error)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        value, error = None, None
        if isinstance(effect, Wait):
            clock.sleep(effect.seconds)
            continue
        token = None if effect.inside is None else _entered(effect.inside, clock)
        try:
            value = effect.fn(*effect.args, **effect.kwargs)
        except Exception as exc:  # noqa: BLE001 - handed to the machine, which decides
            error = exc
        except BaseException:
            _close(machine)
            raise
        finally:
            if token is not None:
                inside_call.reset(token)


async def adrive(machine: Machine[T], clock: Clock) -> T:
    """Run ``machine`` to its end, awaiting calls that return awaitables."""
    value: Any = None
    error: Exception | None = None
    while True:
        try:
            effect = machine.send(value) if error is None else machine.throw(error)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        value, error = None, None
        if isinstance(effect, Wait):
            await clock.asleep(effect.seconds)
            continue
        if type(effect) is Persist:
            try:
                if effect.fn is _WRITE:
                    run, record = effect.args
                    await run.awrite(record)
                else:
                    value = await _AWAITED[effect.fn](*effect.args)
            except Exception as exc:  # noqa: BLE001 - handed to the machine, as a call's
                error = exc
            except BaseException:
                _close(machine)
                raise
            continue
        token = None if effect.inside is None else _entered(effect.inside, clock)
        try:
            value = effect.fn(*effect.args, **effect.kwargs)
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:  # noqa: BLE001 - handed to the machine, which decides
            error = exc
        except BaseException:
            _close(machine)
            raise
        finally:
            if token is not None:
                inside_call.reset(token)


def _entered(inside: tuple[object, object], clock: Clock) -> Token[tuple[object, object] | None]:
    """A call of an entry's user code starts: mark it as running in this thread
    (``inside_call``) and as the run's step in flight."""
    run, label = inside
    if isinstance(run, TaskRun):
        run.in_flight = (
            getattr(label, "seq", run.seq),
            str(getattr(label, "name", "?")),
            clock.now(),
        )
    return inside_call.set(inside)


def _close(machine: Machine[Any]) -> None:
    """Run the machine's ``finally`` blocks now (a shared-limit permit is given
    back at once) when a ``BaseException`` passes through user code, rather than
    whenever the generator is collected. Nothing it raises may hide the original."""
    with contextlib.suppress(Exception):
        machine.close()


class CheckReached(CairnControl):
    """A dry replay (``cairn check``) reached a position the task has not
    recorded yet (or has not completed): from here it would do new work, so the
    replay stops. Control flow, never seen outside the check."""

    def __init__(self, seq: int) -> None:
        super().__init__(f"the replay reached position {seq}, which holds no completed record")
        self.seq = seq


# The ctx of the task running in this thread or coroutine (the app's Context),
# for ``cairn.step`` functions and ``current_context()``; set by ``execute``.
current: ContextVar[Any] = ContextVar("cairn_context", default=None)

FaultHook = Callable[[str, str, int, str], None]
"""``hook(point, task_id, seq, name)``: called at each boundary; a no-op unless a
test installs one (see ``cairn.testing``)."""


def no_fault(point: str, task_id: str, seq: int, name: str) -> None:
    """The production hook: does nothing."""


@dataclass
class TaskRun:
    """One claimed task, as this process runs it."""

    store: Store
    codec: Codec
    clock: Clock
    task_id: str
    batch: str | None
    fence: int
    attempt: int
    history: dict[int, StepRecord]
    # The app's lease keeper: how fresh this task's lease is, by this process's clock.
    leases: LeaseKeeper
    # How long past its expiry another owner's lease is still honoured.
    takeover_grace: timedelta
    hook: FaultHook = no_fault
    poll_interval: float = 1.0
    # The task's time limit (first start + max_duration), and the limit itself.
    deadline: datetime | None = None
    max_duration: float | None = None
    # The app's shared limits, and the owner and lease their permits are held under.
    limits: LimitBook = NO_LIMITS
    # The task's arguments, by name: where a keyed limit finds its key.
    args: Mapping[str, Any] = field(default_factory=dict)
    # Where large conversation messages go (cairn.agent.message_blobs); None: no blob store.
    offloader: Offloader | None = None
    # The app's engine config (spawn and join read the registry and store from
    # it); None for a run made outside an app.
    engine: EngineConfig | None = None
    seq: int = field(default=0)
    # The task's priority: the children it spawns are claimed at the same one.
    priority: int = 0
    # Set once replay has diverged (or a step called ctx from inside itself):
    # every later call raises it again, so an agent's ``except Exception:``
    # cannot carry on at misaligned positions.
    poisoned: CairnError | None = None
    # The operation keys (scope, key) this run is acting on right now: a claim of
    # our own task under our fence is alive only while its key is here.
    acting: set[tuple[str, str]] = field(default_factory=set)
    # When (time.monotonic) to look next whether the task was cancelled.
    next_check: float = field(default_factory=time.monotonic)
    # What a replay does at an entry whose code changed (cairn.engine.changes).
    on_change: ChangePolicy = "fail"
    # Whether ``rerun`` may send a changed (and any later) ``ctx.llm_call`` again.
    rerun_models: bool = False
    # A dry replay (cairn check): nothing is called for a recorded position and
    # nothing is written; a position without a completed record stops it.
    checking: bool = False
    # The store's group-commit queue, when the app has group commit on (None:
    # each write commits alone, through the store).
    group: Coalescer | None = None
    # Which run of the task this is: 1, until a rerun from a step makes the
    # next (``ctx.run_key`` puts it in the keys it derives).
    run_number: int = 1
    # The entry whose user code this run is in now, or was in last: (position,
    # name, when it began). Set as a call starts, read by the lease heartbeat
    # (``LeaseKeeper.follow``), which notes it in the store: the step in flight.
    in_flight: tuple[int, str, datetime] | None = None
    # The task's own budget (TaskDef.budget), and the budgets its model calls
    # count against, found once per run (cairn.engine.budgets).
    budget: Budget | None = None
    budget_scopes: tuple[str, ...] | None = None
    # Whether one of those caps dollars (a model call then needs a price).
    budget_in_usd: bool = False

    # Whether the codec is cairn's JSON (inside a blob-store wrapper or not): its
    # ints and null are written here, without a call into the codec.
    json_scalars: bool = field(default=False, init=False)
    # Whether the app has an observer: tested at each call site, so a step
    # with none builds no keyword arguments for ``observe``.
    observing: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.next_check = time.monotonic() + self.poll_interval
        inner = self.codec.inner if isinstance(self.codec, BlobCodec) else self.codec
        self.json_scalars = isinstance(inner, JsonCodec)
        self.observing = self.engine is not None and self.engine.observer is not no_observer

    def next_seq(self) -> int:
        """The position of the next history entry: a step boundary, where a
        cancelled or overdue task stops."""
        if self.poisoned is not None:
            raise self.poisoned
        if self.deadline is not None and self.clock.now() >= self.deadline:
            raise TimeLimitExceeded(self.task_id, self.max_duration or 0.0)
        # A cancel is seen at the next write anyway; looking every poll interval
        # stops a task whose steps are long at the next boundary, without a
        # read per step.
        if time.monotonic() >= self.next_check:
            self.check_still_ours()
            self.keep_lease()
        self.seq += 1
        return self.seq

    def check_still_ours(self) -> None:
        """Raise ``Cancelled`` or ``LeaseLost`` if the task is no longer ours."""
        self.next_check = time.monotonic() + self.poll_interval
        current = self.store.get_task(self.task_id)
        if current is None or current.fence != self.fence or current.status != "running":
            self.lost()

    def keep_lease(self) -> None:
        """At a step boundary (looked at every poll interval): if the store has
        not confirmed this task's lease for half a lease (the heartbeat cannot
        reach it), renew it now, fenced, before doing any more work. Refused
        (another worker took the task meanwhile): ``LeaseLost``, and the next
        step is never started twice. While the store cannot be reached, the
        renewal waits here, as a write would."""
        if self.checking or self.leases.fresh(self.task_id, self.fence):
            return
        if not self.leases.renew_now(self.task_id, self.fence):
            self.lost()

    def restart(self) -> None:
        """Replay from the top, for the next task attempt."""
        self.seq = 0
        self.poisoned = None

    def check_entry_name(self, what: str, kind: StepKind, name: str) -> None:
        """Refuse with ``InvalidName`` (naming it as ``what``) an entry name no
        store can hold, unless the next position already holds an entry of this
        kind and name. Blank names and NULs were refused only from the release
        that added the check; a SQLite store written before it may hold them,
        and its tasks replay (or resume) those entries, which writes nothing the
        store does not hold already. Only a new entry is refused."""
        try:
            check_name(what, name, max_bytes=None)
        except InvalidName:
            recorded = self.history.get(self.seq + 1)
            if recorded is None or recorded.kind != kind or recorded.name != name:
                raise

    def replayed(self, seq: int, kind: StepKind, name: str) -> StepRecord | None:
        """The record at ``seq``, checked against what the code asks for now."""
        inside = inside_call.get()
        if inside is not None and inside[0] is self:
            self.nested(inside[1], kind, name)
        record = self.history.get(seq)
        if record is not None and (record.kind != kind or record.name != name):
            self.diverge(seq, f"{record.kind} {record.name}", f"{kind} {name}")
        if self.checking and (record is None or record.status != "completed"):
            raise CheckReached(seq)
        return record

    def diverge(self, seq: int, recorded: str, current: str) -> NoReturn:
        """Replay found ``recorded`` where the code asks for ``current``: stop, and
        make every later call of this run raise the same error."""
        self.poisoned = NonDeterminismError(
            task_id=self.task_id, seq=seq, recorded=recorded, current=current
        )
        raise self.poisoned

    def nested(self, outer: object, kind: StepKind, name: str) -> NoReturn:
        """The code asked for ``kind`` ``name`` from inside the function of the
        entry ``outer`` is running: refuse it at once, and for the rest of the run."""
        label = "step" if kind == "step" else f"{kind} entry"
        self.poisoned = NestedStepError(
            f"task {self.task_id!r}: {label} {name!r} was asked for from inside {outer}, "
            f"while its function runs. A step's function runs as one recorded unit and "
            "must not use ctx itself: after a retry its inner entries would be replayed "
            f"at the wrong positions. Call {label} {name!r} from the task function, "
            "before or after the outer step, or call its function directly. Nothing "
            "was recorded for it.",
            task_id=self.task_id,
        )
        raise self.poisoned

    def encode(self, value: Any, what: object) -> str:
        """The recorded form of ``value``, the output of ``what``."""
        # The commonest step outputs, as JsonCodec writes them (never offloaded:
        # they are far below any inline limit). bool is not int here, by type.
        if self.json_scalars:
            if type(value) is int:
                return str(value)
            if value is None:
                return "null"
        try:
            # No known secret is recorded (cairn.redaction); offloaded values
            # were redacted before they went to the blob store.
            text = redact_value(self.codec.encode(value))
        except CodecError as exc:
            raise CodecError(f"{what}: {exc}") from exc
        except BlobStoreFull as full:
            text = self.keep_inline(full, what)
        # A reference to the blob store (cairn.blobs.ref) or a huge inline value.
        if text[:1] == "!" or len(text) >= WARN_ABOVE:
            warn_if_large(text, self.task_id, what)
        return text

    def keep_inline(self, full: BlobStoreFull, what: object) -> str:
        """The value the blob store had no room for, to record in the store itself:
        whatever produced it is not called again. The task stops at its next step
        boundary (or before its result is recorded) with the blob store's error,
        and is handed back, as on a full store disk."""
        if full.inline is None:
            raise full
        if self.poisoned is None:
            self.poisoned = BlobStoreFull(
                path=full.path,
                reason=full.reason,
                size=full.size,
                what=f"{what} of task {self.task_id!r}",
                kept=True,
            )
        return full.inline

    def decode(self, text: str, what: object) -> Any:
        """The value ``text`` records, the output of ``what``."""
        if self.json_scalars:
            if text == "null":
                return None
            # Only what encode writes for an int: ASCII digits, maybe a minus.
            digits = text[1:] if text[:1] == "-" else text
            if digits.isascii() and digits.isdigit():
                return int(text)
        try:
            return self.codec.decode(text)
        except (CodecError, BlobError) as exc:
            raise type(exc)(f"task {self.task_id!r}, {what}: {exc}") from exc

    def write(self, record: StepRecord) -> None:
        """Record one history entry under the fence."""
        first = record.seq not in self.history
        group = self.group
        if group is None:
            written = self.store.record_step(record, self.fence, first=first)
        else:
            written = group.record(record, self.fence, first)
        if not written:
            self.lost()
        self.history[record.seq] = record

    async def awrite(self, record: StepRecord) -> None:
        """``write``, awaited: with group commit on, the event loop runs other
        tasks until the commit holding this entry is durable."""
        group = self.group
        if group is None:
            self.write(record)
            return
        if not await group.arecord(record, self.fence, record.seq not in self.history):
            self.lost()
        self.history[record.seq] = record

    def rerun_steps(self, seq: int, calls: Sequence[int] = ()) -> None:
        """Mark every completed step from ``seq`` on, and the model calls at
        ``calls``, to be run again (under the fence, so a crash in the middle of
        the re-run still re-runs the rest); operations, other model calls and
        recorded inputs keep their records."""
        if not self.store.rerun_steps(self.task_id, seq, self.fence, calls):
            self.lost()
        again = set(calls)
        for at, record in list(self.history.items()):
            if (
                at >= seq
                and record.status == "completed"
                and (record.kind == "step" or at in again)
            ):
                self.history[at] = record._replace(status="retrying", run_attempts=0)

    def start_attempt(self, attempt: int, error: BaseException | None) -> None:
        described = None if error is None else describe_error(error)
        if not self.store.start_attempt(
            self.task_id, self.fence, attempt, described, self.clock.now()
        ):
            self.lost()
        self.attempt = attempt

    def finish(self, status: str, result: str | None, error: BaseException | None) -> None:
        described = None if error is None else describe_error(error)
        if not self.store.finish_task(
            self.task_id, self.fence, status, result, described, self.clock.now()
        ):
            self.lost()

    # -- operations (ctx.once): a completed operation is the task's history entry
    def claim_operation(self, scope: str, key: str, seq: int) -> OperationClaim:
        """Claim ``key`` for this run's position ``seq``, under the fence. With
        group commit on, the claim may share a commit with other tasks' writes;
        it returns only once that commit is durable, so the claim is still
        committed before the operation's function runs."""
        group = self.group
        if group is None:
            return self.store.claim_operation(scope, key, self.task_id, seq, self.fence, self.now())
        args = (scope, key, self.task_id, seq, self.now())
        return self._claimed(group.submit(CLAIM, args, self.fence, None), scope, key, seq)

    async def aclaim_operation(self, scope: str, key: str, seq: int) -> OperationClaim:
        """``claim_operation``, awaited: the event loop runs other tasks meanwhile."""
        group = self.group
        if group is None:
            return self.claim_operation(scope, key, seq)
        args = (scope, key, self.task_id, seq, self.now())
        verdict = await group.asubmit(CLAIM, args, self.fence, None)
        return self._claimed(verdict, scope, key, seq)

    def _claimed(self, verdict: object, scope: str, key: str, seq: int) -> OperationClaim:
        """What a grouped claim came to: granted, or (its row count was 0: the
        key is there already, or the fence moved) the store's own answer."""
        if isinstance(verdict, OperationClaim):
            return verdict  # it ran alone, through the store's own claim
        if verdict:
            return _CLAIMED
        return self.store.claim_operation(scope, key, self.task_id, seq, self.fence, self.now())

    def reclaim_operation(
        self, op: OperationRecord, seq: int, *, claimant_gone: bool
    ) -> OperationClaim:
        """Take over claim ``op.calls`` of a key whose claimant died (or is gone)."""
        now = self.now()
        return self.store.reclaim_operation(
            op.scope,
            op.key,
            op.calls,
            self.task_id,
            seq,
            self.fence,
            now,
            claimant_gone=claimant_gone,
            lapsed_before=now - self.takeover_grace,
        )

    def settle_operation(
        self,
        scope: str,
        key: str,
        calls: int,
        status: str,
        *,
        error: BaseException | None = None,
        permanent: bool = False,
        result: str | None = None,
    ) -> bool:
        """Record claim ``calls`` of ``key`` as ``status``, fenced on this run."""
        return self.store.settle_operation(
            scope,
            key,
            calls,
            status,
            error=None if error is None else describe_error(error),
            permanent=permanent,
            now=self.now(),
            task_id=self.task_id,
            fence=self.fence,
            result=result,
        )

    def complete_operation(
        self, scope: str, key: str, calls: int, output: str, step: StepRecord
    ) -> bool:
        """Record claim ``calls`` completed, as the history entry ``step``; False
        if the key or the task is no longer ours (then nothing is written). With
        group commit on, it may share a commit with other tasks' writes, and
        returns once that commit is durable."""
        group = self.group
        if group is None:
            done = self.store.complete_operation(scope, key, calls, output, step, self.fence)
        else:
            done = group.submit(SETTLE, (scope, key, calls, output), self.fence, step)
        if not done:
            return False
        self.history[step.seq] = step
        return True

    async def acomplete_operation(
        self, scope: str, key: str, calls: int, output: str, step: StepRecord
    ) -> bool:
        """``complete_operation``, awaited: the event loop runs other tasks meanwhile."""
        group = self.group
        if group is None:
            return self.complete_operation(scope, key, calls, output, step)
        if not await group.asubmit(SETTLE, (scope, key, calls, output), self.fence, step):
            return False
        self.history[step.seq] = step
        return True

    def record_late_result(self, scope: str, key: str, output: str) -> None:
        """Keep what a claimant that lost its claim learned, for the audit only."""
        self.store.record_late_result(scope, key, output, self.now())

    # -- waiting, and conversations ------------------------------------------------
    def suspend(self, signal: str, wake_at: datetime | None) -> bool:
        """Suspend the task until ``signal`` (or ``wake_at``), unless the signal is
        already there; False then, or if the fence moved."""
        return self.store.suspend_task(self.task_id, self.fence, signal, wake_at, self.now())

    def open_conversation(self, name: str) -> int | None:
        """The id of the task's conversation ``name``, made under the fence."""
        return self.store.open_conversation(self.task_id, name, self.fence)

    def append_message(self, conv_id: int, message: MessageRecord) -> bool:
        """Append one conversation message under the fence (with group commit
        on, in a commit it may share, durable before this returns)."""
        group = self.group
        if group is None:
            return self.store.append_message(conv_id, message, self.fence)
        return bool(group.submit(MESSAGES, (conv_id, (message,)), self.fence, None))

    def append_messages(self, conv_id: int, messages: Sequence[MessageRecord]) -> bool:
        """Append conversation messages under the fence, all or none (grouped as
        ``append_message`` where the store can keep them all or none in a batch)."""
        group = self.group
        if group is None or (len(messages) > 1 and not group.multirow):
            return self.store.append_messages(conv_id, messages, self.fence)
        return bool(group.submit(MESSAGES, (conv_id, tuple(messages)), self.fence, None))

    def lost(self) -> NoReturn:
        """The fence moved: say why, and stop the task."""
        current = self.store.get_task(self.task_id)
        if current is not None and current.status == "cancelled":
            raise Cancelled(self.task_id)
        raise LeaseLost(self.task_id)

    def now(self) -> datetime:
        return self.clock.now()

    def observe(self, point: str, seq: int, kind: str, name: str, **details: Any) -> None:
        """Tell the app's observer about a call of the entry at ``seq`` (nothing
        is built when there is none)."""
        engine = self.engine
        if engine is None or engine.observer is no_observer:
            return
        event = Event(
            point, self.now(), self.batch, self.task_id, fence=self.fence, seq=seq, kind=kind,
            name=name, **details,
        )  # fmt: skip
        notify(engine.observer, event)


# The writes ``adrive`` awaits (``Persist``): each sync method, and its async twin.
_WRITE = TaskRun.write
_AWAITED: dict[Callable[..., Any], Callable[..., Awaitable[Any]]] = {
    TaskRun.claim_operation: TaskRun.aclaim_operation,
    TaskRun.complete_operation: TaskRun.acomplete_operation,
}
