"""Logs per task: the ``logging`` records a task emits while it runs, kept with it.

The logging module's record factory, wrapped once per process (``install``),
hands each record made to the task running in that thread or coroutine, found
through a context variable set around the task's run (``capturing``); a record
logged outside a task is not kept. It sees the records the program's logging
configuration makes (a logger's level decides before a record is made: with
the root logger at WARNING, the default, ``log.info`` makes none), and changes
nothing of where they go.

Each record is kept as (time, attempt, level, logger, message), its message
formatted and redacted as an error is (``cairn.redaction``), cut to
``LINE_LIMIT`` characters. What a task keeps is bounded: at most ``MAX_LINES``
records and ``MAX_BYTES`` of them (as JSON) per task, over all its attempts;
the rest are counted, not kept. The records of an attempt are written once, at
its end, in one statement with the task's earlier ones (``Store.save_task_logs``):
never one write per record, and a process killed mid-attempt loses that
attempt's records (its steps are still recorded).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime

from cairn.clock import to_iso
from cairn.engine.errortext import bounded_text
from cairn.errors import StoreError
from cairn.redaction import redact
from cairn.store.protocol import Store

__all__ = ["LINE_LIMIT", "MAX_BYTES", "MAX_LINES", "TaskLog", "capturing", "install", "save"]

MAX_LINES = 500
MAX_BYTES = 64 * 1024
LINE_LIMIT = 2000


@dataclass
class TaskLog:
    """The records one run of one task in this process logged (its attempt
    read as each arrives), bounded as they arrive."""

    attempt: Callable[[], int]
    lines: list[dict[str, object]] = field(default_factory=list)
    size: int = 0
    dropped: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, record: logging.LogRecord) -> None:
        """Keep ``record`` if the attempt's share of the bound has room; count it if not."""
        line = _line(record, self.attempt())
        size = len(json.dumps(line, ensure_ascii=False).encode())
        with self._lock:
            if len(self.lines) >= MAX_LINES or self.size + size > MAX_BYTES:
                self.dropped += 1
                return
            self.lines.append(line)
            self.size += size


def _line(record: logging.LogRecord, attempt: int) -> dict[str, object]:
    try:
        message = record.getMessage()
    except Exception:  # noqa: BLE001 - a bad format string must not fail the task
        message = str(record.msg)
    if record.exc_info and record.exc_info[1] is not None:
        error = record.exc_info[1]
        message += f"\n{type(error).__name__}: {error}"
    text = bounded_text(redact(message), LINE_LIMIT)
    return {
        "at": to_iso_from_epoch(record.created),
        "attempt": attempt,
        "level": record.levelname,
        "logger": record.name,
        "message": text,
    }


def to_iso_from_epoch(created: float) -> str:
    return to_iso(datetime.fromtimestamp(created, UTC))


# The log of the task running in this thread or coroutine, if any.
capturing: ContextVar[TaskLog | None] = ContextVar("cairn_task_log", default=None)


def _capturing_factory(inner: Callable[..., logging.LogRecord]) -> Callable[..., logging.LogRecord]:
    """A log record factory that makes each record with ``inner`` and hands it
    to the task running where it was made."""

    def make(*args: object, **kwargs: object) -> logging.LogRecord:
        record = inner(*args, **kwargs)
        log = capturing.get()
        if log is not None:
            # Keeping a record must never break the program's logging.
            with contextlib.suppress(Exception):
                log.add(record)
        return record

    make.cairn_task_logs = True  # type: ignore[attr-defined]
    return make


_install_lock = threading.Lock()


def install() -> None:
    """Wrap the logging module's record factory (once, and again if a program
    set its own since), so each record made inside a task is kept with it.

    A factory, not a handler on the root logger: a handler there would stop
    Python's last-resort output (the warnings a program that configured no
    logging still sees on stderr), and would miss records of a logger that
    does not propagate."""
    with _install_lock:
        current = logging.getLogRecordFactory()
        if not getattr(current, "cairn_task_logs", False):
            logging.setLogRecordFactory(_capturing_factory(current))


def save(store: Store, task_id: str, log: TaskLog) -> None:
    """Add ``log`` to what ``task_id`` kept before, within the task's bound, in
    one write. A failure is logged, never raised: a task's outcome does not
    depend on its logs."""
    with log._lock:
        lines, dropped = list(log.lines), log.dropped
    if not lines and not dropped:
        return
    try:
        kept, before_dropped = store.task_log(task_id) or ([], 0)
        size = sum(len(json.dumps(line, ensure_ascii=False).encode()) for line in kept)
        for line in lines:
            grown = len(json.dumps(line, ensure_ascii=False).encode())
            if len(kept) >= MAX_LINES or size + grown > MAX_BYTES:
                dropped += 1
                continue
            kept.append(line)
            size += grown
        store.save_task_log(task_id, kept, before_dropped + dropped)
    except StoreError as exc:
        # The store itself failed (full, unreachable): the task's own outcome meets
        # the same error and says it once, clearly; a line per task here would
        # repeat one event (a full disk under 4 tasks: 4 more warnings).
        logging.getLogger("cairn").debug("cairn: could not keep the logs of %s: %s", task_id, exc)
    except Exception as exc:  # noqa: BLE001 - the task's outcome stands without its logs
        logging.getLogger("cairn").warning("cairn: could not keep the logs of %s: %s", task_id, exc)
