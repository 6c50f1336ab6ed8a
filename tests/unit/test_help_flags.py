"""``--help`` shows a flag as a flag and a help text as written: no ``<bool>``
beside ``--version``, ``--burst`` or ``--help`` (typer 0.29 prints one), and no
``[otel]`` lost from ``cairn-durable[otel]`` (Rich took it for a tag)."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from cairn import __version__
from cairn.cli import app
from tests.unit.test_help_reflows import COMMANDS

WIDTH = 200


def _help(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(WIDTH)})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("path", COMMANDS, ids=lambda path: " ".join(path) or "cairn")
def test_no_flag_shows_a_value(path: tuple[str, ...]) -> None:
    """No command's help prints a type for an on/off flag, and --help itself is
    shown bare, its description right after it."""
    shown = _help(path)
    assert "<bool>" not in shown
    assert re.search(r"--help +Show this message and exit\.", shown)


def test_version_is_a_bare_flag_that_prints_the_version() -> None:
    """``cairn --help`` lists ``--version`` with no metavar; ``cairn --version``
    prints the version and exits 0."""
    assert re.search(r"│ --version +Print cairn's version and exit\. +│", _help(()))
    result = CliRunner().invoke(app, ["--version"])
    assert (result.exit_code, result.output) == (0, f"cairn {__version__}\n")


def test_extras_in_square_brackets_are_shown() -> None:
    """Help texts naming an extra show it whole, square brackets included."""
    assert "needs cairn-durable[prometheus])" in _help(("metrics",))
    assert "traces URL (cairn-durable[otel])" in _help(("worker",))
    for path in COMMANDS:
        assert "cairn-durable)" not in _help(path), path
