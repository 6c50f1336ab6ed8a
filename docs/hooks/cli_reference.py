"""The command-line reference (docs/cli.md), generated from the ``cairn`` commands.

It walks the typer app's command tree: every command and sub-command, its usage,
its help text, and each argument and option with its value, default, environment
variable and help. Each option's value type comes from the command function's own
annotation, so the page does not depend on how a typer release prints types.

- ``python docs/hooks/cli_reference.py`` writes docs/cli.md (commit it: GitHub
  shows that file).
- As an MkDocs hook, it replaces docs/cli.md's text with a fresh rendering at
  build time, so the site never shows a stale page.
- tests/docs/test_cli_reference.py fails when docs/cli.md is not what this
  renders, so a command or option added without the page changing fails the suite.
"""

from __future__ import annotations

import enum
import inspect
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PAGE = "cli.md"
HEADER = """\
---
search:
  boost: 2
---

# Command-line reference

Every `cairn` command with its arguments and options, generated from the
commands themselves (`python docs/hooks/cli_reference.py` writes this page; the
test suite fails when it is out of date). `cairn COMMAND --help` prints the same
in a terminal. An option's environment variable, where it has one, is read when
the option is not given.
"""
_TYPE_NAMES = {str: "TEXT", int: "INTEGER", float: "NUMBER", Path: "PATH"}


def render() -> str:
    """The whole page, from the ``cairn`` command tree."""
    import typer.main

    from cairn.cli import app

    root = typer.main.get_command(app)
    parts = [HEADER, _paragraphs(root.help or ""), "## Options of `cairn` itself\n"]
    parts.append(_table(root, root.params, arguments=False))
    for path, command in _commands(root, ("cairn",)):
        parts.append(_command(path, command))
    return "\n".join(parts).rstrip("\n") + "\n"


def _commands(group: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Each command under ``group``, depth first: a sub-group, then its sub-commands."""
    for name, command in group.commands.items():
        if getattr(command, "hidden", False):
            continue
        yield (*path, name), command
        if hasattr(command, "commands"):
            yield from _commands(command, (*path, name))


def _command(path: tuple[str, ...], command: Any) -> str:
    name = " ".join(path)
    arguments = [p for p in command.params if _is_argument(p)]
    usage = " ".join([name, "[OPTIONS]", *(_argument_shown(p) for p in arguments)])
    if hasattr(command, "commands"):
        usage += " [COMMAND]"
    lines = [f"## `{name}`\n", "```text", usage, "```\n", _paragraphs(command.help or "")]
    params = [p for p in command.params if not getattr(p, "hidden", False)]
    lines.append(_table(command, params, arguments=bool(arguments)))
    return "\n".join(lines)


def _paragraphs(help_text: str) -> str:
    """The help text as Markdown paragraphs (a laid-out ``\\b`` paragraph kept as is)."""
    paragraphs = inspect.cleandoc(_unescaped(help_text)).split("\n\n")
    return "\n\n".join(paragraph.replace("\b\n", "") for paragraph in paragraphs) + "\n"


def _table(command: Any, params: list[Any], *, arguments: bool) -> str:
    heading = "Argument or option" if arguments else "Option"
    rows = [f"| {heading} | Value | Default | Description |", "| --- | --- | --- | --- |"]
    hints = _hints(command)
    for param in params:
        rows.append(_row(param, hints.get(param.name)))
    rows.append("| `--help` |  |  | Show the help and exit. |")
    return "\n".join(rows) + "\n"


def _row(param: Any, hint: Any) -> str:
    if _is_argument(param):
        names = f"`{_argument_shown(param)}`"
    else:
        names = ", ".join(f"`{opt}`" for opt in [*param.opts, *param.secondary_opts])
    shows_value = not _is_argument(param) and not getattr(param, "is_flag", False)
    value = _value(param, hint) if shows_value else ""
    default = _default(param)
    described = " ".join(_unescaped(param.help or "").split())
    if getattr(param, "required", False) and not _is_argument(param):
        described += " Required."
    if param.envvar:
        described += f" Environment variable: `{param.envvar}`."
    cells = [names, f"`{value}`" if value else "", f"`{default}`" if default else "", described]
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def _value(param: Any, hint: Any) -> str:
    """The option's value: its metavar, else a name for its Python type, with its
    range (``INTEGER, at least 1``) when it has one."""
    shown = param.metavar or _type_name(_unoptional(hint))
    low, high = _bounds(hint)
    if low is not None and high is not None:
        return f"{shown}, {low} to {high}"
    if low is not None:
        return f"{shown}, at least {low}"
    if high is not None:
        return f"{shown}, at most {high}"
    return str(shown)


def _default(param: Any) -> str:
    if getattr(param, "is_flag", False) or param.required or param.default in (None, ()):
        return ""
    default = param.default
    return default.value if isinstance(default, enum.Enum) else str(default)


def _is_argument(param: Any) -> bool:
    return getattr(param, "param_type_name", "") == "argument"


def _argument_shown(param: Any) -> str:
    shown = str(param.metavar or param.name.upper())
    if not param.required and not shown.startswith("["):
        shown = f"[{shown}]"
    return shown


def _hints(command: Any) -> dict[str, Any]:
    """The command function's parameter annotations, ``Annotated`` metadata kept."""
    callback = getattr(command, "callback", None)
    if callback is None:
        return {}
    return typing.get_type_hints(callback, include_extras=True)


def _unoptional(hint: Any) -> Any:
    """The type inside ``Annotated[...]`` and ``X | None``."""
    if typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    return hint


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) is typing.Literal:
        return "|".join(str(choice) for choice in typing.get_args(hint))
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "|".join(str(member.value) for member in hint)
    return _TYPE_NAMES.get(hint, getattr(hint, "__name__", str(hint)).upper())


def _bounds(hint: Any) -> tuple[Any, Any]:
    """The ``min`` and ``max`` the option's ``typer.Option(...)`` declares."""
    for meta in typing.get_args(hint)[1:] if typing.get_origin(hint) is typing.Annotated else ():
        if hasattr(meta, "min") or hasattr(meta, "max"):
            return getattr(meta, "min", None), getattr(meta, "max", None)
    return None, None


def _unescaped(text: str) -> str:
    """Help text as written: the CLI escapes square brackets for Rich's markup."""
    return text.replace("\\[", "[")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs hook: the reference page is rendered afresh at every build."""
    if page.file.src_path != PAGE:
        return markdown
    _, _, body = render().partition("\n---\n")  # the front matter is MkDocs' already
    return body


if __name__ == "__main__":
    target = Path(__file__).resolve().parents[1] / PAGE
    target.write_text(render(), encoding="utf-8")
    print(f"wrote {target}", file=sys.stderr)
