"""Where in the user's code something happened: the first caller outside cairn.

An error about an app's state (its store already open when ``use_store`` comes)
is only useful if it says what put the app in that state. The store records
the call site that opened it; the error names it, and says so when that call
ran while a module was being imported (a batch run at a module's top level,
which ``cairn worker``/``cairn check`` then run again by importing it).
"""

from __future__ import annotations

import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

_CAIRN = Path(__file__).resolve().parent
_STDLIB = Path(sysconfig.get_paths()["stdlib"]).resolve()


@dataclass(frozen=True, slots=True)
class CallSite:
    """A line of the user's code: its file, line and function, and the module
    being imported when it ran (None if it ran after imports, or as __main__)."""

    path: Path
    line: int
    function: str
    importing: str | None

    @property
    def where(self) -> str:
        """``file:line``, the file relative to the current directory if inside it."""
        return f"{_shown(self.path)}:{self.line}"

    def __str__(self) -> str:
        if self.function == "<module>":
            return f"{self.where}, at the top level"
        return f"{self.where}, in {self.function}()"


def outside_caller() -> CallSite | None:
    """The innermost frame of the calling thread that is neither cairn's, the
    standard library's nor the import machinery's; None if there is none (a
    thread cairn started)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith("<") and not _is_library(Path(filename)):
            name = frame.f_globals.get("__name__")
            at_import = frame.f_code.co_name == "<module>" and name != "__main__"
            return CallSite(
                Path(filename),
                frame.f_lineno,
                frame.f_code.co_name,
                str(name) if at_import else None,
            )
        frame = frame.f_back
    return None


def _is_library(path: Path) -> bool:
    resolved = path.resolve()
    if resolved.is_relative_to(_CAIRN):
        return True
    return resolved.is_relative_to(_STDLIB) and "site-packages" not in resolved.parts


def _shown(path: Path) -> str:
    """The path relative to the current directory when it is inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
