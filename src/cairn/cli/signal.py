"""``cairn signal``: send a signal to a task waiting in ``ctx.wait_for``."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.text import Text

from cairn.admin import send_signal
from cairn.clock import SystemClock

from ._actor import cli_actor
from ._consoles import fail, stdout_console
from ._store_option import DEFAULT_URL, StoreOption, opened_store


def signal_command(
    task_id: Annotated[str, typer.Argument(metavar="TASK", help="The task to signal.")],
    name: Annotated[str, typer.Argument(help="The signal's name, as in ctx.wait_for(NAME).")],
    payload: Annotated[
        str, typer.Argument(metavar="[JSON]", help="The payload, as JSON (default: null).")
    ] = "null",
    store: StoreOption = DEFAULT_URL,
) -> None:
    """Send signal NAME with a JSON payload to a task.

    A task waiting in `ctx.wait_for(NAME)` is woken: a worker takes it up (or run
    it again). A task that gets to that wait later finds the signal there. The
    first signal of a name stands; sending it again changes nothing.
    """
    try:
        value: Any = json.loads(payload)
    except json.JSONDecodeError as exc:
        fail(f"the payload is not JSON ({exc.msg} at character {exc.pos}): {payload!r}")
    with opened_store(store) as opened:
        sent = send_signal(opened, task_id, name, value, SystemClock().now(), actor=cli_actor())
    if sent.refused:
        fail(sent.message)
    stdout_console().print(Text(sent.message), soft_wrap=True)
