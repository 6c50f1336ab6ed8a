"""``cairn enqueue MODULE:APP BATCH TASK ITEMS.jsonl``: add one task per line to a
batch from the command line, for `cairn worker` (or a later `run_batch`) to run.

Each line is a JSON object of the task's arguments after ``ctx``. The whole file
is read and checked first: a line that is not JSON, not an object, or does not
fit the task's signature stops the command with its line number, and nothing is
enqueued. An item whose key is already in the batch is skipped, as in
``app.enqueue``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, TextIO

import typer

from cairn.app import Cairn
from cairn.errors import CairnError
from cairn.task import TaskDef

from ._consoles import fail, note
from .worker import AppStoreOption, load_app


def enqueue_command(
    target: Annotated[str, typer.Argument(metavar="MODULE:APP", help="Where the app is.")],
    batch: Annotated[str, typer.Argument(metavar="BATCH", help="The batch to add tasks to.")],
    task: Annotated[str, typer.Argument(metavar="TASK", help="The registered task's name.")],
    items: Annotated[
        Path,
        typer.Argument(
            metavar="ITEMS.jsonl",
            help="One JSON object of the task's arguments per line; - for stdin.",
        ),
    ],
    store: AppStoreOption = None,
    priority: Annotated[
        int, typer.Option(help="The tasks' priority: workers claim higher ones first.")
    ] = 0,
) -> None:
    """Add one task per line of ITEMS.jsonl to BATCH, to be run by `cairn worker`.

    The file is checked whole first: a bad line stops the command with its line
    number and nothing is enqueued. Lines whose item is already in the batch are
    skipped.
    """
    app = load_app(target)
    if store is not None:
        app.use_store(store)
    task_def = _registered(app, target, task)
    try:
        parsed = _read_items(items, task_def, app)
        new = app.enqueue(batch, task_def, parsed, priority=priority)
    except CairnError as exc:
        fail(str(exc))
    finally:
        app.close()
    skipped = len(parsed) - new
    note(
        f"enqueued {new} new task(s) of {task!r} into batch {batch!r} in {app.store_url}"
        + (f"; {skipped} already there" if skipped else "")
    )


def _registered(app: Cairn, target: str, name: str) -> TaskDef[..., Any]:
    if name not in app.task_names():
        known = ", ".join(sorted(app.task_names())) or "none"
        fail(f"{target} registers no task named {name!r} (its tasks: {known})")
    return app.registered(name)


def _read_items(path: Path, task_def: TaskDef[..., Any], app: Cairn) -> list[dict[str, Any]]:
    """Every item of the file, each checked against the task; the first bad line
    stops everything."""
    if str(path) == "-":
        return _checked(sys.stdin, "stdin", task_def, app)
    if not path.is_file():
        fail(f"no items file at {path}")
    with path.open(encoding="utf-8") as lines:
        return _checked(lines, str(path), task_def, app)


def _checked(
    lines: TextIO | Iterable[str], where: str, task_def: TaskDef[..., Any], app: Cairn
) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    try:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue  # a blank line (a trailing newline, a separator) holds no item
            found.append(_item(line, f"{where} line {number}", task_def, app))
    except UnicodeDecodeError as exc:
        fail(f"{where} is not UTF-8 text ({exc}); nothing was enqueued")
    if not found:
        fail(f"{where} holds no items; nothing was enqueued")
    return found


def _item(line: str, where: str, task_def: TaskDef[..., Any], app: Cairn) -> dict[str, Any]:
    try:
        item = json.loads(line)
    except json.JSONDecodeError as exc:
        fail(f"{where} is not JSON ({exc.msg} at column {exc.colno}); nothing was enqueued")
    if not isinstance(item, dict):
        fail(
            f"{where} is a JSON {type(item).__name__}, not an object of argument names to "
            f'values such as {{"app_id": "a1"}}; nothing was enqueued'
        )
    try:
        task_def.encode_arguments(app.codec, item)
    except CairnError as exc:
        fail(f"{where}: {exc}")
    return item
