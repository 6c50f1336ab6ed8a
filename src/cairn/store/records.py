"""The rows a store keeps, as small frozen values in storage terms.

Values (arguments, outputs, results) are already-encoded text here: the store
never interprets them, so no task logic leaks into storage.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, NamedTuple

# "waiting": suspended by ctx.wait_for (or a join on waiting children), holding
# no process, until a signal arrives or its wake_at passes.
TaskStatus = Literal["pending", "running", "waiting", "completed", "failed", "cancelled"]
TASK_STATUSES: tuple[TaskStatus, ...] = (
    "pending",
    "running",
    "waiting",
    "completed",
    "failed",
    "cancelled",
)
FINISHED_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})

# "llm": a recorded model call; "conv": a conversation's compaction (cairn.agent);
# "map": the head of a ctx.map (its items follow as steps); "spawn", "join":
# a child task started and its results; "wait": a ctx.wait_for.
StepKind = Literal["step", "input", "sleep", "op", "llm", "conv", "map", "spawn", "join", "wait"]
# "waiting": a ctx.wait_for that has not been answered yet.
StepStatus = Literal["completed", "retrying", "failed", "waiting"]


@dataclass(frozen=True, slots=True)
class NewTask:
    """A task to create if its id is not taken yet."""

    id: str
    name: str
    args: str
    codec: str
    batch: str | None = None
    item_key: str | None = None
    parent_id: str | None = None
    # The app version it is enqueued under; its first claim records the claimer's.
    version: str | None = None
    # A spawned child: its parent's fence. The child is created only while the
    # parent is running under that fence, in the same statement, so a cancel
    # that cascades to the parent's children cannot miss one made meanwhile.
    parent_fence: int | None = None
    # Claims take the highest priority first (a spawned child: its parent's).
    priority: int = 0


# What a debounced or singleton enqueue did (docs/debounce.md): "new", a task
# made; "debounced", the event landed on the open debounced task of its key;
# "queued", a task made to wait behind the key's holder; "dropped", nothing
# made, the key's holder stands.
GateOutcome = Literal["new", "debounced", "queued", "dropped"]


class Gated(NamedTuple):
    """The task an event went to, what happened, and (debounced) how many
    events that task has absorbed, this one included: the commit order."""

    task_id: str
    outcome: GateOutcome
    events: int = 0


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """One task as stored."""

    id: str
    batch: str | None
    item_key: str | None
    name: str
    args: str
    codec: str
    status: TaskStatus
    attempts: int
    retry_base: int
    fence: int
    owner: str | None
    lease_expires_at: datetime | None
    result: str | None
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime
    # Times it was taken over while running (owner died, lease ran out).
    interruptions: int = 0
    # For a waiting task: when its timeout wakes it (None: only a signal does).
    wake_at: datetime | None = None
    parent_id: str | None = None
    version: str | None = None
    # Which run of the task this is: 1, until a rerun from a step makes the next.
    run: int = 1
    # Claims take the highest priority first; within one, the enqueue order.
    priority: int = 0
    # A debounced task: its key, its window in milliseconds, and how many events
    # it absorbed (each replaced its arguments and pushed ``wake_at``).
    debounce_key: str | None = None
    debounce_ms: int | None = None
    debounce_events: int = 0
    # A singleton task: the key it holds, or the key it is queued behind.
    singleton_key: str | None = None
    singleton_queued: str | None = None


class InFlightNote(NamedTuple):
    """What a running task's owner is doing now: the entry at ``seq`` (``name``),
    begun at ``started_at``, under ``fence`` (``Store.note_in_flight``)."""

    task_id: str
    fence: int
    seq: int
    name: str
    started_at: datetime


class StepRecord(NamedTuple):
    """One entry of a task's history, at position ``seq``.

    A NamedTuple rather than a frozen dataclass: one is built per step, and a
    frozen dataclass's __init__ costs several microseconds more on that path.
    """

    task_id: str
    seq: int
    kind: StepKind
    name: str
    status: StepStatus
    output: str | None
    attempts: int
    task_attempt: int
    run_attempts: int
    error: str | None
    retry_at: datetime | None
    started_at: datetime
    finished_at: datetime
    # Seconds this task attempt has spent waiting on ``RetryAfter`` at this step
    # (deferrals spend no attempt; ``Retry.max_deferral`` bounds their total).
    deferred: float = 0.0
    # What produced the entry ("code:<hash>", or a model call's model, system text
    # and tools); None where there is no code to compare, or recorded before schema 3.
    fingerprint: str | None = None
    # The fingerprint of the changed code that replayed this entry under the
    # ``keep`` policy; None if it was never kept across a change.
    kept: str | None = None


@dataclass(frozen=True, slots=True)
class BatchSummary:
    """A batch with its task counts by status."""

    name: str
    task_name: str
    created_at: datetime
    counts: dict[str, int]
    first_started_at: datetime | None
    last_finished_at: datetime | None

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True, slots=True)
class SignalRecord:
    """A signal sent to a task: ``payload`` is encoded text, in ``codec``."""

    task_id: str
    name: str
    payload: str
    codec: str
    sent_at: datetime


OperationStatus = Literal["claimed", "completed", "failed", "in_doubt", "released"]


@dataclass(frozen=True, slots=True)
class OperationRecord:
    """One side effect guarded by a key: its state and its audit trail."""

    scope: str
    key: str
    status: OperationStatus
    calls: int
    permanent: bool
    task_id: str
    step_seq: int
    claim_fence: int
    result: str | None
    error: str | None
    first_claimed_at: datetime
    claimed_at: datetime
    completed_at: datetime | None
    updated_at: datetime
    # What a claimant learned after it had lost its task (another owner took it
    # over meanwhile), and when: kept for the audit only, never the key's result.
    late_result: str | None = None
    late_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class OperationClaim:
    """The answer to a claim: ``claimed`` is True if this caller may act now;
    otherwise ``record`` is what stands in the way. ``fenced_out`` means the
    caller's own task fence moved, so it must stop."""

    claimed: bool
    record: OperationRecord | None
    fenced_out: bool = False


MessageKind = Literal["message", "summary"]


class MessageRecord(NamedTuple):
    """One row of an agent's conversation, at position ``idx`` within it.

    ``content`` is the whole message in the OpenAI chat shape, as JSON text; a
    ``summary`` row summarizes every message up to ``covers_until``. ``meta`` is
    JSON text about how the row came to be (usage of the model call that wrote
    it, token counts of a compaction), or None. ``conv`` is the conversation's
    name; the stored row carries the conversation's integer key instead of
    ``task_id`` and ``conv`` (see ``Store.open_conversation``). The SQL stores
    keep ``content`` as bytes (plain or zlib-compressed, see
    ``cairn.store.sql.pack_content``) and ``created_at`` as integer microseconds,
    and convert both back when they read a row: a record always holds the JSON
    text (or, for a message offloaded to the blob store, its reference text
    ``!blob:…``, which ``cairn.agent.message_blobs`` resolves) and an aware UTC datetime.
    """

    task_id: str
    conv: str
    idx: int
    role: str
    content: str
    tokens: int
    kind: MessageKind
    covers_until: int | None
    meta: str | None
    created_at: datetime


# One row of the active context as a resume reads it (``Store.load_active_rows``):
# (idx, message, tokens, kind, covers_until, meta). The message is parsed
# already, or, offloaded to the blob store, its reference text ``!blob:…``;
# ``meta`` is still JSON text. No ``created_at``: a resume never reads it (the
# archive view asks ``load_active_messages``). A plain tuple, not a record
# class: a thousand-row conversation is read with one small tuple per row and no
# JSON round trip for the plain messages most rows are.
ActiveRow = tuple[int, "dict[str, Any] | str", int, MessageKind, "int | None", "str | None"]


@dataclass(frozen=True, slots=True)
class ConversationSummary:
    """One conversation of a task, counted: rows, summaries, message tokens."""

    task_id: str
    conv: str
    rows: int
    summaries: int
    next_idx: int
    message_tokens: int


@dataclass(frozen=True, slots=True)
class RecordedCall:
    """A history entry of kind ``llm`` or ``conv`` (a model call or a compaction),
    with its task's batch and codec, for cost reports."""

    task_id: str
    batch: str | None
    codec: str
    seq: int
    kind: StepKind
    name: str
    output: str | None


@dataclass(frozen=True, slots=True)
class PermitRefused:
    """A shared limit had no room: ``held`` of its counted permits belong to calls
    still running (any may end at any moment); the earliest of the others stops
    counting at ``frees_at`` (None if every counted permit is held)."""

    held: int
    frees_at: datetime | None


@dataclass(frozen=True, slots=True)
class BudgetRefused:
    """A budget had no room: ``scope``'s ``measure`` ('usd', in nano-dollars, or
    'tokens') has ``spent`` (reservations included) of ``cap``; the budget was
    raised ``raised`` times when it refused."""

    scope: str
    measure: str
    spent: int
    cap: int
    raised: int


@dataclass(frozen=True, slots=True)
class BudgetRecord:
    """A budget as stored, with what counts against it now: ``spent_*`` is every
    settled call's usage plus every running call's reservation (``held``)."""

    scope: str
    usd_nanos: int | None
    tokens: int | None
    warn_at: float
    raised: int
    warned_at: datetime | None
    reached_at: datetime | None
    updated_at: datetime
    spent_usd_nanos: int
    spent_tokens: int
    held_usd_nanos: int
    held_tokens: int
    parked: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    """A schedule's row: the spec it was counted under, and how far it got.

    Every firing at or before ``covered_until`` has been created or passed over
    on purpose; ``last_fired_at`` is the latest firing actually created."""

    name: str
    task_name: str
    cron: str
    tz: str
    covered_until: datetime
    last_fired_at: datetime | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class TaskRunRecord:
    """A run of a task that a rerun superseded: how it ended (as the task row
    held it then), and where the next run forked from it: every entry before
    ``fork_seq`` is shared by both runs; this run's entries from ``fork_seq``
    on are kept as superseded entries."""

    task_id: str
    run: int
    fork_seq: int
    status: str
    result: str | None
    error: str | None
    attempts: int
    started_at: datetime | None
    finished_at: datetime | None
    forked_at: datetime
    forked_by: str


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One operator action: who (``cli:USER``, ``ui:TOKEN-NAME``, ``api:USER``),
    what, on which task or filter, when, and how many tasks it changed (None if
    its process never said: it died, or the action is under way)."""

    id: int
    at: datetime
    actor: str
    action: str
    target: str
    detail: str | None
    count: int | None
    outcome: str | None
