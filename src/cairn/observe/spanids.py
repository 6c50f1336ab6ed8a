"""Span and trace ids derived from what the store records, not drawn at random.

One trace per batch (its id from the batch name), or, for a task outside any
batch, per root task (the top of its spawn chain). A task run's span id comes
from the task id and the claim's fence (which grows at every claim, so each run
of a task, a resume after a crash or a wake-up after a wait, is a span of its
own in the same trace); a call's from the task id, its position and its call
number. So a task resumed in another process continues its trace, and spans
built after the fact from the record (``cairn.observe.otel``) carry the same ids
as the live ones: a collector sees one span, not two.

``DerivedIds`` is the tracer provider's id generator: it hands out the id set
with ``next()`` for the span being started, and random ids otherwise.
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace.id_generator import IdGenerator


def _digest(bits: int, *parts: object) -> int:
    text = "\x1f".join(str(part) for part in parts).encode()
    value = int.from_bytes(hashlib.sha256(text).digest()[: bits // 8], "big")
    return value or 1  # 0 is the invalid id


def trace_of(batch: str | None, root: str) -> int:
    """The trace of a batch, or of a task outside batches (by its root task)."""
    return (
        _digest(128, "cairn-trace", "batch", batch)
        if batch
        else _digest(128, "cairn-trace", "task", root)
    )


def batch_span(batch: str) -> tuple[int, int]:
    """(trace id, span id) of a batch's span."""
    return trace_of(batch, ""), _digest(64, "cairn-batch", batch)


def task_span(
    task_id: str, fence: int, batch: str | None, root: str
) -> tuple[int, int, int | None]:
    """(trace id, span id, parent span id) of a run of a task: its parent is the
    batch's span (None outside a batch; a spawned child's parent is its parent's run)."""
    parent = batch_span(batch)[1] if batch else None
    return trace_of(batch, root), _digest(64, "cairn-task", task_id, fence), parent


def call_span(task_id: str, seq: int, call: int) -> int:
    """The span id of call number ``call`` of the entry at ``seq``."""
    return _digest(64, "cairn-call", task_id, seq, call)


def parent_context(trace_id: int, span_id: int) -> Any:
    """A context whose current span is (trace_id, span_id), sampled: a parent."""
    span_context = trace.SpanContext(
        trace_id, span_id, is_remote=True, trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED)
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(span_context))


class DerivedIds(IdGenerator):
    """Hands out the ids set by ``next`` (per thread), random ones otherwise."""

    def __init__(self) -> None:
        self._next = threading.local()

    @contextmanager
    def next(self, trace_id: int, span_id: int) -> Iterator[None]:
        self._next.ids = (trace_id, span_id)
        try:
            yield
        finally:
            self._next.ids = None

    def generate_span_id(self) -> int:
        ids = getattr(self._next, "ids", None)
        return ids[1] if ids else random.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        ids = getattr(self._next, "ids", None)
        return ids[0] if ids else random.getrandbits(128) or 1
