"""Tables of rows: rich tables on a terminal, plain aligned columns everywhere else.

When stdout is not a terminal (a pipe, a file, a test runner) tables have no
borders, no colour, no wrapping and no trailing blanks, so the text can be
grepped and cut.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Annotated

import typer
from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from cairn.engine.owners import owner_is_gone

# Free-text columns wrap on a narrow terminal, but not into a sliver; cut with an
# ellipsis, a few characters and the "…" still say what kind of text it was.
_FREE_MIN_WIDTH = 24
_CUT_MIN_WIDTH = 8
# Space between two columns: padding on each side, or a collapsed gap on a terminal.
_GAP = 2

STATUS_STYLES = {
    "pending": "cyan",
    "running": "yellow",
    "completed": "green",
    "retrying": "yellow",
    "failed": "red",
    "cancelled": "magenta",
    "waiting": "blue",
}

Cell = Text | str


def status_text(status: str) -> Text:
    """A status word, coloured on a terminal."""
    return Text(status, style=STATUS_STYLES.get(status, ""))


def task_status_text(status: str, owner: str | None) -> Text:
    """A task's status word; a running task whose owning process is gone (by
    ``engine.owners.owner_is_gone``, the rule claiming uses) says so, since it
    will not move until a worker or run takes it over."""
    if status == "running" and owner_is_gone(owner):
        return Text("running (owner gone)", style=STATUS_STYLES["running"])
    return status_text(status)


def _plain_len(cell: Cell) -> int:
    text = cell.plain if isinstance(cell, Text) else cell
    return max((cell_len(line) for line in text.splitlines()), default=0)


class RowTable:
    """A table of rows; ids and times are never cut. On a terminal, free text is
    cut to the width left with an ellipsis, or wrapped whole with ``wide``.

    ``right`` names right-aligned (number) columns, ``free`` the free-text ones
    (such as errors) that give up width on a narrow terminal. Plain output (a
    pipe, a file) is never cut: scripts read every character.
    """

    def __init__(
        self,
        console: Console,
        columns: Sequence[str],
        *,
        right: Iterable[str] = (),
        free: Iterable[str] = (),
        wide: bool = False,
    ) -> None:
        self._console = console
        self._free = [name in set(free) for name in columns]
        self._widths = [cell_len(name) for name in columns]
        self.table = Table(
            box=box.SIMPLE_HEAD if console.is_terminal else None,
            show_edge=False,
            header_style="bold" if console.is_terminal else "",
            pad_edge=False,
            collapse_padding=console.is_terminal,
        )
        aligned = set(right)
        cut = console.is_terminal and not wide
        self._cut = cut
        for name, free_text in zip(columns, self._free, strict=True):
            self.table.add_column(
                name,
                justify="right" if name in aligned else "left",
                no_wrap=not free_text or cut,
                overflow="ellipsis" if free_text and cut else "fold",
            )

    def add_row(self, *cells: Cell) -> None:
        self._widths = [max(w, _plain_len(c)) for w, c in zip(self._widths, cells, strict=True)]
        self.table.add_row(*cells)

    @property
    def row_count(self) -> int:
        return self.table.row_count

    def _needed_width(self) -> int:
        """The narrowest width that cuts no id or time: free text wraps, nothing else."""
        least = _CUT_MIN_WIDTH if self._cut else _FREE_MIN_WIDTH
        widths = [
            min(width, least) if free else width
            for width, free in zip(self._widths, self._free, strict=True)
        ]
        return sum(widths) + _GAP * (len(widths) - 1)

    def _cut_free_columns(self) -> None:
        """Give the free columns what the terminal has left after the others, so
        rich cuts them (with an ellipsis) and never an id or a time."""
        fixed = sum(w for w, free in zip(self._widths, self._free, strict=True) if not free)
        free_count = sum(self._free)
        left = self._console.width - fixed - _GAP * (len(self._widths) - 1)
        share = max(_CUT_MIN_WIDTH, left // free_count)
        for column, free in zip(self.table.columns, self._free, strict=True):
            if free:
                column.max_width = share

    def print(self) -> None:
        """Print the table to its console."""
        if self._cut and any(self._free):
            self._cut_free_columns()
        print_table(self._console, self.table, needed_width=self._needed_width())


WideOption = Annotated[
    bool,
    typer.Option(
        "--wide", help="On a terminal, show long values whole (wrapped) instead of cut with '…'."
    ),
]


def print_table(console: Console, table: Table, *, needed_width: int = 0) -> None:
    """Print ``table``. On a terminal narrower than ``needed_width`` rows run past
    the edge (the terminal wraps them) rather than cut an id; plain output loses
    the padding at the end of each line."""
    if console.is_terminal:
        console.width = max(console.width, needed_width)
        console.print(table)
        return
    with console.capture() as captured:
        console.print(table)
    lines = captured.get().splitlines()
    console.file.write("".join(line.rstrip() + "\n" for line in lines))


def key_values(rows: Iterable[tuple[str, Cell]]) -> Table:
    """A two-column grid of labels and values, for a record's header."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    for label, value in rows:
        grid.add_row(label, value)
    return grid
