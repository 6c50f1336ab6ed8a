"""``cairn tail``: a running task's streamed model text, as it arrives (cairn.observe.lane)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from cairn.observe.lane import lane_url, tail

from ._consoles import fail
from ._store_option import DEFAULT_URL, StoreOption, opened_store


def tail_command(
    task_id: Annotated[str, typer.Argument(metavar="TASK", help="The running task to watch.")],
    store: StoreOption = DEFAULT_URL,
) -> None:
    """Print the text of TASK's streamed model calls as it arrives, until its run ends.

    The text comes from the ephemeral lane of the process running the task (started
    by `cairn worker --lane`, or `serve_lane(app)` in your script), on this host,
    over server-sent events: nothing of it is stored. Only streamed calls show text
    (`ctx.llm(..., stream=True)`, the Agents SDK's `run_streamed`); each call is
    announced on a line of its own.
    """
    with opened_store(store) as opened:
        row = opened.get_task(task_id)
    if row is None:
        fail(f"no task {task_id!r} in this store")
    if row.status != "running" or row.owner is None:
        fail(f"task {task_id!r} is {row.status}, not running: there is nothing to tail")
    url = lane_url(row.owner)
    if url is None:
        fail(
            f"task {task_id!r} runs in {row.owner}, which serves no lane on this host: "
            "run it with `cairn worker --lane` (or serve_lane(app)) on this host"
        )
    try:
        for shown in tail(url, task_id):
            if "text" in shown:
                sys.stdout.write(str(shown["text"]))
            elif "call" in shown:
                sys.stdout.write(f"[{shown['call']}]\n")
            elif "done" in shown:
                sys.stdout.write("\n")
            elif "ended" in shown:
                sys.stdout.write(f"[task {task_id} {shown['ended']}]\n")
                return
            sys.stdout.flush()
    except OSError as exc:
        fail(f"the lane of {row.owner} at {url} went away ({exc}); is the task still running?")
    except KeyboardInterrupt:
        return
