"""``/task/tail?id=TASK``: a running task's streamed model text, relayed live.

The task page of a running task opens it as an ``EventSource``
(``dashboard.js``) and shows the text as it arrives. The relay reads the task's
owner from the store, finds that owner's token lane on this host
(``cairn.observe.lane``) and passes its server-sent events on, one thread per
watcher, writing nothing. No lane (the task is not running, or its process
serves none here): 204, which tells the browser not to reconnect.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import anyio
from starlette.concurrency import iterate_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from cairn.admin.views import task_view
from cairn.observe.lane import lane_url
from cairn.observe.lane import tail as lane_tail
from cairn.ui.config import UIConfig


async def tail(config: UIConfig, limiter: anyio.CapacityLimiter, request: Request) -> Response:
    """Relay the lane of the task ``id`` names, or 204 when it has none."""
    task_id = request.query_params.get("id", "")
    url = await anyio.to_thread.run_sync(_lane_of, config, task_id, limiter=limiter)
    if url is None:
        return Response(status_code=204)
    headers = {"Cache-Control": "no-store"}
    relayed = iterate_in_threadpool(_relayed(url, task_id))
    return StreamingResponse(relayed, media_type="text/event-stream", headers=headers)


def _lane_of(config: UIConfig, task_id: str) -> str | None:
    try:
        view = task_view(config.store, task_id)
    finally:
        config.store.close_thread()  # the pool's threads come and go
    if view is None or view.task.status != "running" or view.task.owner is None:
        return None
    return lane_url(view.task.owner)


def _relayed(url: str, task_id: str) -> Iterator[bytes]:
    """The lane's events as server-sent events, up to the end of the task's run."""
    try:
        for shown in lane_tail(url, task_id):
            yield f"data: {json.dumps(shown)}\n\n".encode()
    except OSError:
        yield b'data: {"ended": "unreachable"}\n\n'  # the lane went away with its process
