"""Every error cairn raises, in one place.

The hierarchy::

    CairnError                      root of every ordinary cairn error
    ├── ConfigurationError          bad store URL, missing extra, bad option
    ├── TransferError               an export file or import cannot be used; nothing written
    ├── InvalidName                 a task id, key or other name no store can hold (a ValueError)
    ├── StoreError                  the store cannot be used as asked
    │   ├── StoreUnavailable        unreachable or busy right now; nothing was lost, try later
    │   ├── StoreReadOnly           the store can be read but not written
    │   ├── NotACairnStore          the file or database is not cairn's
    │   ├── BlobStoreFull           the blob store's disk is full; free space, run again
    │   └── SchemaTooNew            written by a newer cairn; upgrade cairn
    ├── TaskError                   about one task
    │   ├── UnknownTask             no task with that id
    │   ├── TaskNotRegistered       the stored task names a function this app lacks
    │   ├── TaskArgumentsError      arguments do not fit the function's signature
    │   ├── TaskConflict            same task id, different function or arguments
    │   ├── TaskBusy                a live process owns the task right now
    │   ├── TaskFailed              the task ended failed; carries the recorded error
    │   │   └── ChildFailed         a task joined by ctx.join ended failed or cancelled
    │   ├── TaskCancelled           the task ended cancelled
    │   ├── TaskWaiting             the task is suspended, waiting for a signal
    │   ├── ResultTimeout           app.result gave up waiting for the task to end
    │   └── NestedStepError         a step's function used ctx (a step inside a step)
    ├── NonDeterminismError         replay asked for something else at a position
    │   └── AgentDefinitionChanged  an Agents SDK run resumed with another agent definition
    ├── CodecError                  a value cannot be encoded or decoded
    │   └── RecordCorrupt           a recorded entry does not match its checksum
    ├── BlobError                   a value offloaded to the blob store cannot be used
    │   ├── BlobMissing             the record points at a blob that is not there
    │   └── BlobCorrupt             the blob's bytes do not match the recorded sha256
    └── OperationError              about one operation key
        ├── InDoubtOperation        claimed by an attempt that died; settle it first
        └── OperationFailed         the key failed permanently; settle it to try again
    Permanent                       raise it (or from it) to fail without retrying
    Transient                       raise it (or from it) to say "this may work later"
    └── MalformedAnswer             a model's 200 answer was not a completion (a proxy's page)
    RetryAfter                      the outside service said "not now, try in N seconds"

    CairnControl (BaseException)    control flow an agent must not swallow
    ├── LeaseLost                   another worker owns the task now; stop at once
    ├── Cancelled                   the task was cancelled; stop at once
    ├── Suspended                   the task now waits for a signal; stop here
    └── TimeLimitExceeded           the task ran past its max_duration; it fails

``LeaseLost`` and ``Cancelled`` derive from ``BaseException`` so that an agent's
``except Exception:`` cannot swallow them and carry on writing.
"""

from __future__ import annotations

from typing import Any


class CairnError(Exception):
    """Root of every ordinary error cairn raises."""


class ConfigurationError(CairnError):
    """cairn was configured in a way it cannot work with."""


class TransferError(CairnError):
    """An export, import, backup or prune was refused; nothing was written."""


class InvalidName(CairnError, ValueError):
    """A name cairn stores and indexes (a task id, batch name, operation key or
    scope, signal, conversation, schedule or limit name) cannot be stored: it is
    empty, too long for an index, or holds a lone surrogate or a NUL character.
    Raised before anything is written. ``kind`` says which name, ``value`` is it.
    """

    def __init__(self, message: str, *, kind: str, value: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.value = value


class StoreError(CairnError):
    """The store cannot be used as asked."""


class StoreUnavailable(StoreError):
    """The store cannot be reached (or stays locked) right now: a lost connection
    that did not come back within the reconnect timeout, a SQLite file locked by
    another writer past the busy timeout. Nothing recorded was lost; run again
    once the store is back, and every task resumes from its last checkpoint."""


class StoreReadOnly(StoreError):
    """The store can be read but not written (a read-only file or directory, a
    read-only mount, a replica). Reading commands work; running does not."""


class BlobStoreFull(StoreError):
    """The disk under the blob store is full (or its quota used up): the value
    was not written there. A store error, not the task's: no attempt is spent,
    and the task is handed back to resume once space is freed.

    ``inline`` is the encoded value that did not fit, when the codec that tried
    to offload it knows it; the engine then records it in the store itself, so
    the step that produced it is not called again (``what`` names that entry,
    ``kept`` says it was recorded)."""

    def __init__(
        self, *, path: str, reason: str, size: int, what: str = "", kept: bool = False
    ) -> None:
        self.path, self.reason, self.size, self.what = path, reason, size, what
        self.inline: str | None = None
        whose = f" ({what})" if what else ""
        saved = (
            " That value was kept in the store itself, so it is not computed again." if kept else ""
        )
        super().__init__(
            f"the disk holding the blob store {path} is full ({reason}) writing a value "
            f"of {size:,} bytes{whose}.{saved} Free space there (or give the app a blob "
            "store on a larger disk: Cairn(blobs=...) or CAIRN_BLOBS), then run again: "
            "every task resumes from its last checkpoint."
        )


class NotACairnStore(StoreError):
    """The path or database holds something other than a cairn store."""


class SchemaTooNew(StoreError):
    """The store was written by a newer cairn than this one."""


class TaskError(CairnError):
    """An error about one task."""

    def __init__(self, message: str, *, task_id: str | None = None) -> None:
        super().__init__(message)
        self.task_id = task_id


class UnknownTask(TaskError):
    """No task with that id exists in the store."""


class TaskNotRegistered(TaskError):
    """A stored task names a task function that this app has not registered."""


class TaskArgumentsError(TaskError):
    """The arguments given for a task do not fit its function's signature."""


class TaskConflict(TaskError):
    """A task id is already used by a task with another function or arguments."""


class TaskBusy(TaskError):
    """A live process owns the task; cairn will not run a second copy."""


class TaskFailed(TaskError):
    """The task ended failed. ``error`` holds the recorded type, message, traceback."""

    def __init__(self, message: str, *, task_id: str, error: dict[str, Any]) -> None:
        super().__init__(message, task_id=task_id)
        self.error = error


class TaskCancelled(TaskError):
    """The task ended cancelled."""


class TaskWaiting(TaskError):
    """The task is suspended in ``ctx.wait_for``; no process holds it. Send the
    signal, then run it again or let a worker take it up."""

    def __init__(self, message: str, *, task_id: str, waiting_for: str | None = None) -> None:
        super().__init__(message, task_id=task_id)
        self.waiting_for = waiting_for


class ResultTimeout(TaskError, TimeoutError):
    """``app.result(task_id, timeout=…)`` waited that long and the task had not
    ended (it may still be running elsewhere, or waiting for a signal)."""


class NestedStepError(TaskError):
    """A step's function (or a map item's) used ``ctx`` while it ran: a step inside
    a step. Refused at once and never retried: after a retry the inner entries
    would be replayed at the wrong positions."""


class NonDeterminismError(CairnError):
    """On replay, the code asked for something other than what is recorded.

    Nothing is overwritten: the recorded history stays as it was.
    """

    def __init__(self, *, task_id: str, seq: int, recorded: str, current: str) -> None:
        super().__init__(
            f"task {task_id!r} at position {seq}: the record holds {recorded!r} but the "
            f"code now asks for {current!r}. The task's code changed in a way that "
            "breaks replay. Either restore the old code and run `cairn retry "
            f"{task_id}`, or start the work under a new task id (or batch name). "
            "Nothing was overwritten."
        )
        self.task_id = task_id
        self.seq = seq
        self.recorded = recorded
        self.current = current


class AgentDefinitionChanged(NonDeterminismError):
    """An agent run (``cairn.integrations.openai_agents.run``, or a Pydantic AI
    agent with ``CairnDurability``) was resumed with another agent definition
    than it started with. Nothing was sent and nothing recorded was changed."""

    def __init__(
        self, *, task_id: str, seq: int, changes: list[str], framework: str = "Agents SDK"
    ) -> None:
        CairnError.__init__(
            self,
            f"task {task_id!r} started its {framework} run (position {seq}) with another "
            f"agent definition than this one: {'; '.join(changes)}. Its record answers "
            "the agent it started with, so resuming with this one would be wrong. Either "
            f"restore that definition and run it again (`cairn retry {task_id}` if it "
            "failed), or run the new agent under a new task id. Nothing recorded was "
            "changed.",
        )
        self.task_id = task_id
        self.seq = seq
        self.recorded = "the agent definition it started with"
        self.current = "; ".join(changes)
        self.changes = changes


class CodeChanged(NonDeterminismError):
    """On replay, the entry at a recorded position keeps its name but what
    produced it changed (a step's code; a model call's model, system text or
    tools), and the task's ``on_change`` policy is ``fail``. Nothing is
    overwritten. ``recorded`` and ``current`` are the two fingerprints."""

    def __init__(
        self, *, task_id: str, seq: int, label: str, recorded: str, current: str, changed: str
    ) -> None:
        CairnError.__init__(
            self,
            f"task {task_id!r}: {label} changed since it was recorded ({changed}; "
            f"recorded {recorded!r}, now {current!r}). Its recorded result would be "
            "replayed for code that no longer produces it, so the task stops here "
            "(on_change='fail'). Choose what in-flight tasks do: on_change='rerun' runs "
            "it again from here, on_change='keep' replays the recorded result, or "
            "branch on ctx.patched(...) in the task (docs/versions.md). "
            "`cairn check` lists every task this change reaches. Nothing was overwritten.",
        )
        self.task_id = task_id
        self.seq = seq
        self.recorded = recorded
        self.current = current
        self.changed = changed


class ChildFailed(TaskFailed):
    """A child task given to ``ctx.join`` ended failed or cancelled. Never
    retried by the parent's policy: the child's end is final until an operator
    retries it (``cairn retry CHILD``), then the parent."""


class CodecError(CairnError):
    """A value could not be encoded for the record, or decoded from it."""


class RecordCorrupt(CodecError):
    """A history entry read back does not match the checksum written with it:
    the store was changed on disk (an edit in place, bytes written over the
    file, a failing disk). The entry is never replayed; the task fails with
    this error, naming the task and the position."""

    def __init__(self, message: str, *, task_id: str, seq: int) -> None:
        super().__init__(message)
        self.task_id = task_id
        self.seq = seq


class BlobError(CairnError):
    """A value offloaded to the blob store cannot be read back (or written)."""


class BlobMissing(BlobError):
    """The record points at a blob that the blob store does not hold."""


class BlobCorrupt(BlobError):
    """The blob's bytes do not match the size or sha256 the record holds."""


class OperationError(CairnError):
    """An error about one operation key."""

    def __init__(self, message: str, *, key: str, scope: str = "") -> None:
        super().__init__(message)
        self.key = key
        self.scope = scope


class InDoubtOperation(OperationError):
    """A key was claimed by an attempt that died before recording an outcome.

    cairn cannot know whether the outside world acted, so it does not run the
    function again. Settle it with ``cairn ops resolve KEY``, or give the
    operation a ``reconcile=`` function or ``on_doubt="retry"``.
    """


class OperationFailed(OperationError):
    """The key's function failed with a permanent error; it is not called again."""


class Permanent(Exception):
    """An error that must never be retried.

    Raise it directly, or ``raise Permanent("why") from err`` to wrap an outside
    error. A step or task that raises it fails at once with the error recorded.
    """


class Transient(Exception):
    """An outside error that may go away if the call is made again later
    (a 5xx answer, a timeout, a dropped connection, gRPC ``UNAVAILABLE``).

    ``cairn.outside_errors`` raises it ``from`` the original error, and
    ``cairn.outside_errors.is_transient`` recognises it; use that as
    ``Retry(retry_on=is_transient)`` to retry only what may succeed later.
    """


class MalformedAnswer(Transient):
    """A model provider answered a request with HTTP 200 and something that is
    not a chat completion: a body that is not JSON (a proxy's or gateway's
    page, a body cut short), a completion without choices, a choice without a
    message, an error object where the completion should be. ``provider``,
    ``model`` and ``problem`` say which and what; the message (which goes into
    the task's history) is redacted as provider errors are.

    It is ``Transient``: such an answer usually comes from something between
    cairn and the model (a proxy, a router, a load balancer) and goes away when
    the request is sent again, so the call's ``Retry`` policy may send it again.
    """

    def __init__(self, message: str, *, provider: str, model: str, problem: str) -> None:
        super().__init__(message)
        self.provider = provider
        self.model = model
        self.problem = problem


class RetryAfter(Exception):
    """The outside service asked to be called again later (HTTP 429 with
    ``Retry-After``, gRPC ``RESOURCE_EXHAUSTED``, a quota error).

    A step that raises it waits ``seconds`` and calls again. The wait is durable,
    and it does not spend one of the step's retry attempts: being told to wait
    is not a failure of the work.
    """

    def __init__(self, seconds: float, message: str = "") -> None:
        if not seconds >= 0:  # also refuses NaN
            raise ValueError(f"RetryAfter({seconds}): seconds must be zero or positive")
        super().__init__(message or f"the service asked to retry after {seconds:g}s")
        self.seconds = float(seconds)


class CairnControl(BaseException):
    """Control flow that user code must not swallow."""


class LeaseLost(CairnControl):
    """Another worker now owns the task. This process stops the task at once."""

    def __init__(self, task_id: str) -> None:
        super().__init__(
            f"task {task_id!r}: this process no longer holds its lease (another worker "
            "claimed it after the lease expired). Stopping the task here; nothing more "
            "is written."
        )
        self.task_id = task_id


class Suspended(CairnControl):
    """The task suspended itself (``ctx.wait_for``): this process stops running it,
    and it holds no process until a signal (or its timeout) wakes it."""

    def __init__(self, task_id: str, waiting_for: str) -> None:
        super().__init__(f"task {task_id!r} is waiting for {waiting_for!r}")
        self.task_id = task_id
        self.waiting_for = waiting_for


class TimeLimitExceeded(CairnControl):
    """The task ran longer than its ``max_duration``; it fails, not retried.

    A ``BaseException``, so an agent's ``except Exception:`` cannot keep a task
    running past its limit."""

    def __init__(self, task_id: str, limit_seconds: float) -> None:
        super().__init__(
            f"task {task_id!r} ran longer than its max_duration of {limit_seconds:g}s "
            "(counted from its first start); stopped at a step boundary. Raise the "
            "limit and `cairn retry` it to go on from its last checkpoint."
        )
        self.task_id = task_id
        self.limit_seconds = limit_seconds


class Cancelled(CairnControl):
    """The task was cancelled while it ran. This process stops the task at once."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"task {task_id!r} was cancelled; stopping it here.")
        self.task_id = task_id
