"""``--help`` text reflows to the terminal: no summary is broken mid-sentence
where its docstring happened to wrap in the source."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from cairn.cli import app
from cairn.cli._help_text import summary

WIDTH = 200
# A line the renderer wrapped at WIDTH columns is long; a shorter one that does
# not end a sentence was broken by a newline in the source.
WRAPPED_AT_LEAST = WIDTH - 60
SENTENCE_END = re.compile(r"[.:;!?)`]$")


def _commands(group: TyperGroup, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name, command in group.commands.items():
        if isinstance(command, TyperGroup):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name)


def _root() -> TyperGroup:
    root = typer.main.get_command(app)
    assert isinstance(root, TyperGroup)
    return root


CLICK_APP = _root()
COMMANDS = list(_commands(CLICK_APP))


def _help(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(WIDTH)})
    assert result.exit_code == 0, result.output
    return result.output


def _text_lines(output: str) -> list[str]:
    """The help's lines, with panel borders and padding taken off (a panel's
    top or bottom edge, with its title, becomes a blank line)."""
    return [
        "" if line.lstrip().startswith(("╭", "╰")) else line.strip(" │")
        for line in output.splitlines()
    ]


def test_every_command_is_checked() -> None:
    """The walk finds the group, its commands and the ops sub-commands, so the
    checks below cannot pass by checking nothing."""
    assert {(), ("tasks",), ("ops",), ("ops", "resolve")} <= set(COMMANDS)


@pytest.mark.parametrize("path", COMMANDS, ids=lambda path: " ".join(path) or "cairn")
def test_no_help_line_is_broken_mid_sentence(path: tuple[str, ...]) -> None:
    """At 200 columns, a line of ``cairn ... --help`` that stops short of the
    width ends a sentence (or is followed by nothing but a blank line)."""
    lines = _text_lines(_help(path))
    broken = [
        f"{line!r} then {following!r}"
        for line, following in itertools.pairwise(lines)
        if line
        and following
        and not SENTENCE_END.search(line)
        and len(line) < WRAPPED_AT_LEAST
        and following[0].islower()
    ]
    assert broken == []


def test_command_list_summaries_are_one_line_each() -> None:
    """In ``cairn --help`` every command's summary short enough to fit is on
    its own single line, whatever its docstring's line breaks."""
    listing = _help(())
    for name, command in CLICK_APP.commands.items():
        line = summary(command.help or "")
        if len(line) < WRAPPED_AT_LEAST:
            assert re.search(rf"│ {re.escape(name)} +{re.escape(line)} +│", listing), name
