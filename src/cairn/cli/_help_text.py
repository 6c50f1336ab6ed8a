"""Help text that reflows to the terminal, whatever the docstring's line breaks,
and flags shown as flags.

Typer's rich help keeps a docstring's single line breaks in the command list
and in every paragraph after the first, so text wrapped at 80 columns in the
source came out broken mid-sentence on a wider terminal (or doubly wrapped on a
narrower one). Each command's paragraphs are joined into lines here, and the
help renderer wraps them to the terminal. A paragraph that is laid out on
purpose (a ``\\b`` line first, or lines that start with a space, ``-`` or
``*``) is kept as written.

Typer renders help as Rich markup, so ``cairn-durable[otel]`` in a help text
lost its ``[otel]`` as an unknown tag: square brackets are escaped here.

Typer 0.29 prints a type beside every on/off flag (``--version  <bool>``), as if
it took a value; each flag here, ``--help`` included, is given an empty metavar
so that help shows the flag alone, as older typer releases did.
"""

from __future__ import annotations

import inspect
from typing import Any

from rich.markup import escape
from typer.core import TyperArgument, TyperGroup, TyperOption

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
        group.help = escape(reflowed(group.help))
    for command in group.commands.values():
        if isinstance(command, TyperGroup):
            reflow_help(command)
        elif command.help:
            command.help = escape(reflowed(command.help))
        if command.short_help is None and command.help:
            command.short_help = summary(command.help)
        for param in command.params:
            if isinstance(param, TyperArgument | TyperOption) and param.help:
                param.help = escape(param.help)


def show_flags_bare(command: Any) -> None:
    """Give every on/off flag of ``command`` and of the commands under it (their
    ``--help`` too) an empty metavar: help then shows no value for it."""
    help_option = command.get_help_option(command.context_class(command))
    for param in [*command.params, *([help_option] if help_option is not None else [])]:
        if getattr(param, "is_flag", False) and not getattr(param, "count", False):
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        show_flags_bare(sub)
