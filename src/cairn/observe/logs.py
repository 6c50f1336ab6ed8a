"""Log output for cairn's long-running commands: plain text or one JSON object a line.

``configure_logging("json")`` (``cairn worker --log-format json``, ``cairn watch
--log-format json``) writes each record as ``{"ts", "level", "logger",
"message", ...}`` with the record's extra fields (``batch``, ``done``, ...),
for a log shipper to parse; ``"text"`` writes ``2026-05-24T06:00:00Z INFO
cairn: ...`` (UTC, to the second). Either way the HTTP clients' (httpx,
httpcore, httpx2) per-request INFO lines are left out: a webhook post is cairn's to report.
Call it from your own program before ``run_batch`` for the same output there.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, Literal, TextIO

from cairn.progress import LOGS_MARK

LogFormat = Literal["text", "json"]
QUIET = ("httpx", "httpcore", "httpx2")
# The attributes every LogRecord has; the rest were passed as extra=.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def _utc(record: logging.LogRecord) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + (
        f".{int(record.msecs):03d}Z"
    )


class JsonFormatter(logging.Formatter):
    """One JSON object a record: ts (UTC, milliseconds), level, logger, message,
    the extra fields, and the traceback as ``error`` if there is one."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": _utc(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                data[key] = (
                    value if isinstance(value, str | int | float | bool | None) else str(value)
                )
        if record.exc_info:
            data["error"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False)


def text_formatter() -> logging.Formatter:
    formatter = logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%Y-%m-%dT%H:%M:%SZ"
    )
    formatter.converter = time.gmtime
    return formatter


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
