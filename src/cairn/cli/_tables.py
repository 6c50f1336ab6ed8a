"""Tables of rows: rich tables on a terminal, plain aligned columns everywhere else.

When stdout is not a terminal (a pipe, a file, a test runner) tables have no
borders, no colour, no wrapping and no trailing blanks, so the text can be
grepped and cut.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Annotated

import typer
from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from cairn.engine.owners import owner_is_gone
from cairn.store.records import TaskRecord

from ._consoles import note

# Free-text columns wrap on a narrow terminal, but not into a sliver; cut with an
# ellipsis, a few characters and the "…" still say what kind of text it was.
_FREE_MIN_WIDTH = 24
_CUT_MIN_WIDTH = 8
# Space between two columns: padding on each side, or a collapsed gap on a terminal.
_GAP = 2
# A long id (task, key, batch) cut to fit a terminal keeps at least this many
# characters: its head and its tail, which tell ids of one batch apart.
_ID_MIN_WIDTH = 16
# A cell that is a time, as the CLI prints one (or a placeholder for none): its
# column is never cut, so no terminal ever splits a timestamp.
_TIME = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d|-?$")

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


def task_list_status(task: TaskRecord) -> Text:
    """``task_status_text``, saying why a debounced or queued singleton task waits."""
    text = task_status_text(task.status, task.owner)
    if task.status == "waiting" and task.singleton_queued is not None:
        text.append(" (queued)")
    elif task.status == "waiting" and task.debounce_key is not None and task.started_at is None:
        text.append(" (debounce)")
    return text


def _plain_len(cell: Cell) -> int:
    text = cell.plain if isinstance(cell, Text) else cell
    return max((cell_len(line) for line in text.splitlines()), default=0)


def _cut_middle(cell: Cell, width: int) -> Cell:
    """``cell`` in ``width`` characters: its head, "…", its tail (style kept)."""
    text = cell.plain if isinstance(cell, Text) else cell
    if cell_len(text) <= width:
        return cell
    tail = (width - 1) // 2
    head = width - 1 - tail
    cut = f"{text[:head]}…{text[len(text) - tail :]}"
    return Text(cut, style=cell.style) if isinstance(cell, Text) else cut


def _is_time_column(cells: Iterable[Cell]) -> bool:
    return all(_TIME.match(c.plain if isinstance(c, Text) else c) for c in cells)


class RowTable:
    """A table of rows that fits the terminal; times and numbers are never cut.

    On a terminal, free text is cut to the width left with an ellipsis, and if
    the rows are still wider than the terminal, the widest ids (any other
    left-aligned column that does not hold times) are cut in the middle,
    ``schedule:nigh…T19:30:00Z``. With ``wide`` nothing is cut: free text wraps
    whole and rows run as wide as they need.

    ``right`` names right-aligned (number) columns, ``free`` the free-text ones
    (such as errors) that give up width first. Plain output (a pipe, a file) is
    never cut: scripts read every character.
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
        self._aligned = [name in set(right) for name in columns]
        self._rows: list[tuple[Cell, ...]] = []
        # The width each cut id column's cells are cut to, by column index.
        self._caps: dict[int, int] = {}
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
        self._rows.append(cells)

    @property
    def row_count(self) -> int:
        return len(self._rows)

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

    def _header_width(self, index: int) -> int:
        return cell_len(str(self.table.columns[index].header))

    def _cut_ids(self) -> None:
        """Narrow the id columns until the rows fit the terminal, the widest
        first, none below ``_ID_MIN_WIDTH`` or its header; ``_caps`` holds the
        widths their cells are cut to."""
        over = self._needed_width() - self._console.width
        floors = {
            index: max(_ID_MIN_WIDTH, self._header_width(index))
            for index, (free, right) in enumerate(zip(self._free, self._aligned, strict=True))
            if not free and not right and not _is_time_column(row[index] for row in self._rows)
        }
        while over > 0:
            narrowable = [i for i, floor in floors.items() if self._widths[i] > floor]
            if not narrowable:
                return
            widest = max(narrowable, key=lambda index: self._widths[index])
            self._widths[widest] -= 1
            self._caps[widest] = self._widths[widest]
            over -= 1

    def _leave_out_columns(self) -> None:
        """Leave out the last columns while the rows are still wider than the
        terminal (never the first), and say so on stderr: a column left out
        whole is better than one the terminal splits across two lines."""
        left_out: list[str] = []
        while self._needed_width() > self._console.width and len(self._widths) > 1:
            column = self.table.columns.pop()
            left_out.insert(0, str(column.header))
            for kept in (self._widths, self._free, self._aligned):
                kept.pop()
        if left_out:
            self._rows = [row[: len(self._widths)] for row in self._rows]
            note(
                f"{len(left_out)} column(s) left out to fit {self._console.width} "
                f"columns: {', '.join(left_out)}. A wider terminal shows them, and so "
                "does piped output (| cat), which is never cut."
            )

    def print(self) -> None:
        """Print the table to its console."""
        if self._cut:
            self._cut_ids()
            self._leave_out_columns()
        for cells in self._rows:
            self.table.add_row(
                *(
                    _cut_middle(cell, self._caps[index]) if index in self._caps else cell
                    for index, cell in enumerate(cells)
                )
            )
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
