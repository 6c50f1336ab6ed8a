"""``cairn logs TASK``: what a task logged (the ``logging`` module) while it ran."""

from __future__ import annotations

from cairn.admin.logs import task_logs

from ._consoles import note, stdout_console
from ._json_output import JsonOption, print_json
from ._store_option import DEFAULT_URL, StoreOption, opened_store
from .show import TaskArgument, get_task_or_fail


def logs_command(
    task_id: TaskArgument,
    store: StoreOption = DEFAULT_URL,
    as_json: JsonOption = False,
) -> None:
    """Show what a task logged while it ran (records the logging configuration let
    through, redacted), oldest first, with its attempt; bounded per task, and the
    records past the bound counted."""
    with opened_store(store) as opened:
        get_task_or_fail(opened, task_id)
        view = task_logs(opened, task_id)
    if as_json:
        lines = [
            {"at": x.at, "attempt": x.attempt, "level": x.level, "logger": x.logger,
             "message": x.message}
            for x in view.lines
        ]  # fmt: skip
        print_json({"task_id": task_id, "lines": lines, "not_kept": view.dropped})
        return
    console = stdout_console()
    for line in view.lines:
        console.print(
            f"{line.at} attempt {line.attempt} {line.level} {line.logger}: {line.message}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    if not view.lines:
        note(f"task {task_id} kept no log records")
    if view.dropped:
        note(f"{view.dropped} more record(s) not kept ({view.bound})")
