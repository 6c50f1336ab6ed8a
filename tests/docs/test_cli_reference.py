"""docs/cli.md, the command-line reference, is the CLI: every command and option.

The page is generated from the typer app by docs/hooks/cli_reference.py (which
also renders it afresh at every site build). A command or an option added, or
a help text changed, without regenerating the page fails here, with the command
that regenerates it.
"""

from __future__ import annotations

import importlib.util
import re
from types import ModuleType
from typing import Any

import pytest
import typer.main

from cairn.cli import app as cli_app
from tests.docs.blocks import ROOT
from tests.docs.test_command_list import registered_commands

PAGE = ROOT / "docs" / "cli.md"


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    """docs/hooks/cli_reference.py, loaded by path as MkDocs loads a hook."""
    spec = importlib.util.spec_from_file_location(
        "cli_reference", ROOT / "docs" / "hooks" / "cli_reference.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_is_what_the_commands_render(generator: ModuleType) -> None:
    """docs/cli.md is exactly the rendering of today's commands."""
    assert PAGE.read_text(encoding="utf-8") == generator.render(), (
        "docs/cli.md is out of date: run `python docs/hooks/cli_reference.py` and commit it"
    )


def _sections() -> dict[str, str]:
    """The page's sections by command: "cairn ops resolve" -> its text."""
    text = PAGE.read_text(encoding="utf-8")
    parts = re.split(r"^## `(cairn[^`]*)`$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_every_command_has_a_section_and_every_option_a_row() -> None:
    """Each registered command and sub-command has its section, and each of its
    options (every name, short ones too) and arguments is in that section."""
    sections = _sections()
    assert {f"cairn {name}" for name in registered_commands()} == set(sections)
    root: Any = typer.main.get_command(cli_app)
    groups: list[tuple[tuple[str, ...], Any]] = [((), root)]
    while groups:
        path, group = groups.pop()
        for name, command in group.commands.items():
            where = " ".join(("cairn", *path, name))
            for param in command.params:
                names = [*param.opts, *param.secondary_opts]
                if getattr(param, "param_type_name", "") == "argument":
                    names = [str(param.metavar or param.name.upper()).strip("[]")]
                for shown in names:
                    assert f"`{shown}" in sections[where] or f"`[{shown}" in sections[where], (
                        f"{where}: {shown} is not on the page"
                    )
            if hasattr(command, "commands"):
                groups.append(((*path, name), command))


def test_the_global_options_are_listed() -> None:
    """``cairn --version`` has its row, before the first command."""
    text = PAGE.read_text(encoding="utf-8")
    assert text.index("| `--version` |") < text.index("## `cairn batches`")
