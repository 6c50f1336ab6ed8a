"""The last line of defence: any cairn or driver error a command did not turn into
a sentence itself becomes one red line and exit code 2, never a traceback.

Commands still catch what they expect and say it in their own words; this
catches the rest (a malformed URL found before a store opens, a driver error a
store let through), so a user never reads eighty lines of someone else's stack.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from typer.core import TyperGroup

from cairn.errors import CairnError

from ._consoles import fail
from ._help_text import reflow_help, show_flags_bare


def _is_driver_error(exc: BaseException) -> bool:
    """True for an error of SQLite's or psycopg's own (psycopg is an extra: its
    errors are known by module, so it is not imported here)."""
    if isinstance(exc, sqlite3.Error):
        return True
    return type(exc).__module__.split(".", 1)[0] == "psycopg"


class CairnGroup(TyperGroup):
    """The ``cairn`` command group, with the errors above turned into one line
    (and every help text reflowed and every flag shown bare, see ``_help_text``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        reflow_help(self)
        show_flags_bare(self)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except CairnError as exc:
            fail(str(exc))
        except Exception as exc:
            if not _is_driver_error(exc):
                raise
            kind = f"{type(exc).__module__}.{type(exc).__name__}"
            fail(f"the store's driver failed ({kind}): {exc}")


__all__ = ["CairnGroup"]
