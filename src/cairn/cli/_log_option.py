"""``--log-format text|json``, for the commands that run for long (worker, watch)."""

from __future__ import annotations

from typing import Annotated

import typer

from cairn.observe.logs import configure_logging

from ._consoles import fail

LogFormatOption = Annotated[
    str,
    typer.Option(
        "--log-format", metavar="text|json", help="Log lines as text or one JSON object a line."
    ),
]


def set_up_logging(log_format: str) -> None:
    """Log as ``log_format`` (cairn.observe.logs), or exit with what is wrong."""
    try:
        configure_logging(log_format)
    except ValueError as exc:
        fail(str(exc))
