"""Where the CLI writes: data on stdout, remarks and failures on stderr.

When a stream is not a terminal (a pipe, a file, a test runner) its console has
no colour and no wrapping, so the text can be grepped and cut. A failure is one
red line on stderr and exit code 2, so scripts can tell it from data.
"""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console
from rich.text import Text

USAGE_EXIT = 2

# Wide enough that plain output never wraps a row; a table only takes what it needs.
_PLAIN_WIDTH = 100_000


def _console(*, stderr: bool) -> Console:
    # markup/emoji off: cells hold user data such as "[x]" or ":tada:" verbatim.
    console = Console(stderr=stderr, markup=False, emoji=False, highlight=False)
    if not console.is_terminal:
        console = Console(
            stderr=stderr,
            markup=False,
            emoji=False,
            highlight=False,
            color_system=None,
            width=_PLAIN_WIDTH,
        )
    return console


def stdout_console() -> Console:
    """A console on the current stdout (looked up now, so test runners can swap it)."""
    return _console(stderr=False)


def stderr_console() -> Console:
    """A console on the current stderr."""
    return _console(stderr=True)


def fail(message: str, *, code: int = USAGE_EXIT) -> NoReturn:
    """Print ``message`` as one red line on stderr and exit with ``code``."""
    # One line, whatever the message holds, so scripts can grep it.
    line = " ".join(message.split())
    stderr_console().print(Text(f"error: {line}", style="red"), soft_wrap=True)
    raise typer.Exit(code)


def note(message: str) -> None:
    """Print a remark that is not data (stderr, so stdout stays parseable)."""
    stderr_console().print(Text(message, style="dim"), soft_wrap=True)
