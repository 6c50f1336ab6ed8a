"""``cairn enqueue MODULE:APP BATCH TASK ITEMS.jsonl``: add one task per line to a
batch from the command line, for `cairn worker` (or a later `run_batch`) to run.

Each line is a JSON object of the task's arguments after ``ctx``. The whole file
is read and checked first: a line that is not JSON, not an object, or does not
fit the task's signature stops the command with its line number, and nothing is
enqueued. An item whose key is already in the batch is skipped, as in
``app.enqueue``. With ``--debounce`` or ``--singleton`` each line is an event
sent in order, as ``app.submit`` sends it (docs/debounce.md).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, TextIO, cast

import typer

from cairn.app import Cairn
from cairn.errors import CairnError
from cairn.gates import OnConflict
from cairn.task import TaskDef

from ._consoles import fail, note
from .worker import AppStoreOption, load_app

KeyOption = Annotated[
    str | None,
    typer.Option(
        metavar="FIELD",
        help="Key each item by this field's value (default: all its fields); "
        "with --debounce, the debounce key.",
    ),
]
DebounceOption = Annotated[
    float | None,
    typer.Option(
        metavar="SECONDS",
        help="Debounce: the task of a key runs once no line of that key came for "
        "SECONDS, with the last line's arguments.",
    ),
]
SingletonOption = Annotated[
    str | None,
    typer.Option(
        metavar="KEY",
        help="At most one task of KEY pending, running or waiting; see --on-conflict.",
    ),
]
OnConflictOption = Annotated[
    str,
    typer.Option(
        metavar="drop|queue",
        help="A --singleton task whose KEY is held: drop it, or queue it behind the holder.",
    ),
]


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
    key: KeyOption = None,
    debounce: DebounceOption = None,
    singleton: SingletonOption = None,
    on_conflict: OnConflictOption = "drop",
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
        item_key = _keyed_by(key, parsed)
        if debounce is not None or singleton is not None:
            events = _Events(debounce, singleton, on_conflict)
            sent = events.send(app, batch, task_def, parsed, item_key, priority)
            note(f"sent {len(parsed)} event(s) to batch {batch!r} in {app.store_url}: {sent}")
            return
        new = app.enqueue(batch, task_def, parsed, key=item_key, priority=priority)
    except CairnError as exc:
        fail(str(exc))
    finally:
        app.close()
    skipped = len(parsed) - new
    note(
        f"enqueued {new} new task(s) of {task!r} into batch {batch!r} in {app.store_url}"
        + (f"; {skipped} already there" if skipped else "")
    )


class _Events:
    """Each line sent as an event (``app.submit``), and what became of them."""

    def __init__(self, debounce: float | None, singleton: str | None, on_conflict: str) -> None:
        self.debounce = debounce
        self.singleton = singleton
        self.on_conflict = cast("OnConflict", on_conflict)  # submit checks it

    def send(
        self,
        app: Cairn,
        batch: str,
        task_def: TaskDef[..., Any],
        items: list[dict[str, Any]],
        item_key: Callable[[Mapping[str, Any]], str] | None,
        priority: int,
    ) -> str:
        counts: Counter[str] = Counter()
        for item in items:
            answer = app.submit(
                batch,
                task_def,
                item,
                key=item_key,
                priority=priority,
                debounce=self.debounce,
                singleton=self.singleton,
                on_conflict=self.on_conflict,
            )
            counts[answer.outcome] += 1
        return ", ".join(f"{counts[o]} {o}" for o in ("new", "debounced", "queued", "dropped"))


def _keyed_by(
    field: str | None, items: list[dict[str, Any]]
) -> Callable[[Mapping[str, Any]], str] | None:
    """The item key of ``--key FIELD``: the field's value as text; every item must have it."""
    if field is None:
        return None
    for number, item in enumerate(items, start=1):
        if field not in item:
            fail(f"item {number} has no field {field!r} for --key; nothing was enqueued")

    def key_of(item: Mapping[str, Any]) -> str:
        value = item[field]
        return value if isinstance(value, str) else json.dumps(value, sort_keys=True)

    return key_of


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
