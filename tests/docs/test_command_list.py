"""The README's command list is the CLI's: every listed command exists, every
registered one is listed, and README.ja.md lists the same ones."""

from __future__ import annotations

import re
from pathlib import Path

import typer.main

from cairn.cli import app as cli_app
from tests.docs.blocks import ROOT, parse_page

_COMMAND = re.compile(r"\bcairn ((?:[a-z][a-z-]*)(?: [a-z][a-z-]*)?)")
_SLASH_TAIL = re.compile(r"/ (?!cairn )([a-z][a-z-]*)\s")  # "cairn export ... / import"


def listed_commands(readme: Path) -> set[str]:
    """The commands named in the first block after the CLI heading of a README."""
    page = parse_page(readme)
    text = readme.read_text(encoding="utf-8")
    heading = re.search(r"^## .*(command line|コマンドライン).*$", text, re.MULTILINE)
    assert heading is not None, f"{readme.name} has no command-line section"
    heading_line = text[: heading.start()].count("\n") + 1
    block = next(block for block in page.blocks if block.line > heading_line)
    names: set[str] = set()
    for line in block.text.split("\n"):
        usage = line[:39]  # the usage column; the description may name commands too
        words = _COMMAND.findall(line) + _SLASH_TAIL.findall(usage + " ")
        names.update(words)
    registered = registered_commands()
    # "cairn ops resolve" names a subcommand, "cairn show TASK" does not: keep the
    # second word only where it is a registered subcommand.
    return {name if name in registered else name.split(" ")[0] for name in names}


def registered_commands() -> set[str]:
    """Every command of the typer app, and each subcommand as "group sub"."""
    group = typer.main.get_command(cli_app)
    names: set[str] = set()
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        names.add(name)
        for sub in getattr(command, "commands", {}):
            names.add(f"{name} {sub}")
    return names


def test_readme_lists_every_command_and_only_real_ones() -> None:
    """Each command in README.md's list is registered, and each registered one is listed."""
    listed, registered = listed_commands(ROOT / "README.md"), registered_commands()
    assert not listed - registered, f"listed but not a command: {sorted(listed - registered)}"
    assert not registered - listed, f"commands missing from the list: {sorted(registered - listed)}"


def test_japanese_readme_lists_the_same_commands() -> None:
    """README.ja.md is kept in step: its command list names the same commands."""
    english, japanese = listed_commands(ROOT / "README.md"), listed_commands(ROOT / "README.ja.md")
    assert english == japanese, (
        f"only in README.md: {sorted(english - japanese)}; "
        f"only in README.ja.md: {sorted(japanese - english)}"
    )
