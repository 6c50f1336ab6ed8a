"""Help text that reflows to the terminal, whatever the docstring's line breaks.

Typer's rich help keeps a docstring's single line breaks in the command list
and in every paragraph after the first, so text wrapped at 80 columns in the
source came out broken mid-sentence on a wider terminal (or doubly wrapped on a
narrower one). Each command's paragraphs are joined into lines here, and the
help renderer wraps them to the terminal. A paragraph that is laid out on
purpose (a ``\\b`` line first, or lines that start with a space, ``-`` or
``*``) is kept as written.
"""

from __future__ import annotations

import inspect

from typer.core import TyperGroup

_LAID_OUT = (" ", "\t", "-", "*", "\b")


def _reflowed_paragraph(paragraph: str) -> str:
    lines = paragraph.split("\n")
    if any(line.startswith(_LAID_OUT) for line in lines):
        return paragraph
    return " ".join(paragraph.split())


def reflowed(help_text: str) -> str:
    """``help_text`` with each paragraph on one line (laid-out ones kept)."""
    paragraphs = inspect.cleandoc(help_text).split("\n\n")
    return "\n\n".join(_reflowed_paragraph(paragraph) for paragraph in paragraphs)


def summary(help_text: str) -> str:
    """The first paragraph of ``help_text`` as one line: the command list's entry."""
    return " ".join(inspect.cleandoc(help_text).split("\n\n", 1)[0].split())


def reflow_help(group: TyperGroup) -> None:
    """Reflow the help of ``group`` and of every command under it (sub-groups too),
    and give each command without a ``short_help`` its one-line summary."""
    if group.help:
        group.help = reflowed(group.help)
    for command in group.commands.values():
        if isinstance(command, TyperGroup):
            reflow_help(command)
        elif command.help:
            command.help = reflowed(command.help)
        if command.short_help is None and command.help:
            command.short_help = summary(command.help)
