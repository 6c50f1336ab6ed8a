"""Log output for cairn's long-running commands: plain text or one JSON object a line.

``configure_logging("json")`` (``cairn worker --log-format json``, ``cairn watch
--log-format json``) writes each record as ``{"ts", "level", "logger",
"message", ...}`` with the record's extra fields (``batch``, ``done``, ...),
for a log shipper to parse; ``"text"`` writes ``2026-05-24T06:00:00Z INFO
cairn: ...`` (UTC, to the second). Either way the HTTP clients' (httpx,
httpcore, httpx2) per-request INFO lines are left out: a webhook post is cairn's to report.
Call it from your own program before ``run_batch`` for the same output there.

Either format writes every line through ``cairn.redaction.redact``: no known
secret and nothing shaped like a credential reaches the log, whoever logged
it (an SDK's own logger quoting a request included).

Either format writes a record's traceback cut to ``TRACEBACK_LIMIT`` (64 KiB,
as a recorded error is): its first and last parts, the exception's type and
message among the last, around a line saying how much was cut. A task whose
exception holds a provider's 50 MB answer would otherwise write a 50 MB line.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from types import TracebackType
from typing import Any, Literal, TextIO

from cairn.engine.errortext import ERROR_TEXT_LIMIT, bounded_text
from cairn.progress import LOGS_MARK
from cairn.redaction import redact

LogFormat = Literal["text", "json"]
# What logging hands formatException: sys.exc_info() of the record.
ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None] | tuple[None, None, None]
QUIET = ("httpx", "httpcore", "httpx2")
TRACEBACK_LIMIT = ERROR_TEXT_LIMIT
"""The most bytes (UTF-8) of one record's traceback that either format writes."""
# The attributes every LogRecord has; the rest were passed as extra=.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def _utc(record: logging.LogRecord) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + (
        f".{int(record.msecs):03d}Z"
    )


class _BoundedTracebacks(logging.Formatter):
    """A formatter whose tracebacks are cut to ``TRACEBACK_LIMIT``."""

    def formatException(self, ei: ExcInfo) -> str:  # noqa: N802 - logging's name
        return bounded_text(super().formatException(ei), TRACEBACK_LIMIT)


class JsonFormatter(_BoundedTracebacks):
    """One JSON object a record: ts (UTC, milliseconds), level, logger, message,
    the extra fields, and the traceback as ``error`` if there is one."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": _utc(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                plain = value if isinstance(value, int | float | bool | None) else str(value)
                data[key] = redact(plain) if isinstance(plain, str) else plain
        if record.exc_info:
            data["error"] = redact(self.formatException(record.exc_info))
        return json.dumps(data, ensure_ascii=False)


class TextFormatter(_BoundedTracebacks):
    """``2026-05-24T06:00:00Z INFO cairn: ...`` (UTC, to the second), then the
    traceback if there is one."""

    converter = staticmethod(time.gmtime)

    def __init__(self) -> None:
        super().__init__(
            "%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%Y-%m-%dT%H:%M:%SZ"
        )

    def format(self, record: logging.LogRecord) -> str:
        cached = record.exc_text
        if not cached:
            return redact(super().format(record))  # its traceback: formatException
        # Another handler's formatter made the traceback first and logging kept
        # it on the record, whole: this one writes it cut, and leaves it as it was.
        record.exc_text = bounded_text(cached, TRACEBACK_LIMIT)
        try:
            return redact(super().format(record))
        finally:
            record.exc_text = cached


def text_formatter() -> logging.Formatter:
    return TextFormatter()


def configure_logging(
    fmt: str = "text", *, level: int = logging.INFO, stream: TextIO | None = None
) -> None:
    """Send every log record to ``stream`` (stderr) as ``fmt`` (``LogFormat``:
    text or json), replacing the root logger's handlers."""
    if fmt not in ("text", "json"):
        raise ValueError(f"--log-format {fmt!r}: choose text or json")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else text_formatter())
    setattr(handler, LOGS_MARK, True)  # progress lines go through logging now
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name in QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)
