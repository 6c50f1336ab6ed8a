"""cairn: run long AI-agent batches durably. Kill it any time, run it again."""

from __future__ import annotations

from cairn._batch import BatchReport, Failure
from cairn.app import Cairn
from cairn.clock import Clock, SystemClock
from cairn.codec import Codec, JsonCodec, PickleCodec
from cairn.context import Context
from cairn.errors import (
    CairnControl,
    CairnError,
    Cancelled,
    CodecError,
    ConfigurationError,
    LeaseLost,
    NonDeterminismError,
    NotACairnStore,
    Permanent,
    SchemaTooNew,
    StoreError,
    TaskArgumentsError,
    TaskBusy,
    TaskCancelled,
    TaskConflict,
    TaskError,
    TaskFailed,
    TaskNotRegistered,
    UnknownTask,
)
from cairn.retry import Retry
from cairn.task import TaskDef, step

__version__ = "0.1.0"

__all__ = [
    "BatchReport",
    "Cairn",
    "CairnControl",
    "CairnError",
    "Cancelled",
    "Clock",
    "Codec",
    "CodecError",
    "ConfigurationError",
    "Context",
    "Failure",
    "JsonCodec",
    "LeaseLost",
    "NonDeterminismError",
    "NotACairnStore",
    "Permanent",
    "PickleCodec",
    "Retry",
    "SchemaTooNew",
    "StoreError",
    "SystemClock",
    "TaskArgumentsError",
    "TaskBusy",
    "TaskCancelled",
    "TaskConflict",
    "TaskDef",
    "TaskError",
    "TaskFailed",
    "TaskNotRegistered",
    "UnknownTask",
    "step",
]
