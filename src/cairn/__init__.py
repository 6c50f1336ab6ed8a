"""cairn: run long AI-agent batches durably. Kill it any time, run it again."""

from __future__ import annotations

from cairn.app import Cairn
from cairn.budgets import Budget
from cairn.clock import Clock, SystemClock
from cairn.codec import Codec, JsonCodec, PickleCodec
from cairn.context import Context
from cairn.engine.batch import BatchReport, Failure
from cairn.engine.children import ChildTask
from cairn.engine.once import before_send_here as before_send
from cairn.engine.waits import Signal
from cairn.errors import (
    BlobCorrupt,
    BlobError,
    BlobMissing,
    BlobStoreFull,
    CairnControl,
    CairnError,
    Cancelled,
    ChildFailed,
    CodecError,
    CodeChanged,
    ConfigurationError,
    InDoubtOperation,
    InvalidName,
    LeaseLost,
    MalformedAnswer,
    NestedStepError,
    NonDeterminismError,
    NotACairnStore,
    OperationError,
    OperationFailed,
    Permanent,
    RecordCorrupt,
    ResultTimeout,
    RetryAfter,
    SchemaTooNew,
    StoreError,
    StoreReadOnly,
    StoreUnavailable,
    Suspended,
    TaskArgumentsError,
    TaskBusy,
    TaskCancelled,
    TaskConflict,
    TaskError,
    TaskFailed,
    TaskNotRegistered,
    TaskWaiting,
    TimeLimitExceeded,
    TransferError,
    Transient,
    UnknownTask,
)
from cairn.keys import op_key
from cairn.limits import Concurrency, Rate, TokenRate
from cairn.operations import operation
from cairn.outside_errors import is_transient
from cairn.redaction import register_secret
from cairn.retention import Retention
from cairn.retry import Retry
from cairn.store.records import Gated
from cairn.task import TaskDef, step

__version__ = "0.1.0"

__all__ = [
    "BatchReport",
    "BlobCorrupt",
    "BlobError",
    "BlobMissing",
    "BlobStoreFull",
    "Budget",
    "Cairn",
    "CairnControl",
    "CairnError",
    "Cancelled",
    "ChildFailed",
    "ChildTask",
    "Clock",
    "CodeChanged",
    "Codec",
    "CodecError",
    "Concurrency",
    "ConfigurationError",
    "Context",
    "Failure",
    "Gated",
    "InDoubtOperation",
    "InvalidName",
    "JsonCodec",
    "LeaseLost",
    "MalformedAnswer",
    "NestedStepError",
    "NonDeterminismError",
    "NotACairnStore",
    "OperationError",
    "OperationFailed",
    "Permanent",
    "PickleCodec",
    "Rate",
    "RecordCorrupt",
    "ResultTimeout",
    "Retention",
    "Retry",
    "RetryAfter",
    "SchemaTooNew",
    "Signal",
    "StoreError",
    "StoreReadOnly",
    "StoreUnavailable",
    "Suspended",
    "SystemClock",
    "TaskArgumentsError",
    "TaskBusy",
    "TaskCancelled",
    "TaskConflict",
    "TaskDef",
    "TaskError",
    "TaskFailed",
    "TaskNotRegistered",
    "TaskWaiting",
    "TimeLimitExceeded",
    "TokenRate",
    "TransferError",
    "Transient",
    "UnknownTask",
    "before_send",
    "is_transient",
    "op_key",
    "operation",
    "register_secret",
    "step",
]
