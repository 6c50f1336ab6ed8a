"""The ephemeral lane: a streamed model call's text, to watchers, as it arrives.

The durable record of a model call is the completed call (one entry, one
reply row), written when the stream has ended. Watchers want the tokens
before that. ``serve_lane(app)`` gives the app a second lane that writes
nothing: an engine observer (``cairn.engine.observer``) that hands each piece
of a streamed call's text (the ``call_chunk`` events of ``ctx.llm(...,
stream=True)`` and of the Agents SDK's ``run_streamed``) to whoever is
watching that task, over server-sent events on 127.0.0.1, and forgets it.
Nothing is stored per token; a watcher that connects late sees what arrives
from then on; a watcher that reads too slowly loses pieces (its queue is
bounded) rather than slow the agent down.

Events, each a JSON ``data:`` line: ``{"call": NAME}`` when a model call
starts, ``{"text": ...}`` for each piece, ``{"done": NAME}`` when the call is
recorded, ``{"ended": STATUS}`` when the task's run ends in this process.

Finding the lane: the process writes its address once, when the lane starts,
to a file named by its owner id in the lanes directory (``$CAIRN_LANES``, or
``cairn-lanes-UID`` in the temporary directory), and removes it on
``close()``. ``cairn tail TASK`` reads the task's owner from the store and
that owner's file, so it finds a task running on the same host.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote
from urllib.request import urlopen

from cairn.engine.observer import Event, Observer, no_observer, notify

if TYPE_CHECKING:
    from cairn.app import Cairn

# Pieces a watcher may fall behind by before it loses some.
BACKLOG = 1000


def lanes_dir() -> Path:
    """Where processes register their lanes (``$CAIRN_LANES`` or the default)."""
    chosen = os.environ.get("CAIRN_LANES")
    if chosen:
        return Path(chosen)
    return Path(tempfile.gettempdir()) / f"cairn-lanes-{os.getuid()}"


def lane_file(owner: str) -> Path:
    """The file that holds the address of ``owner``'s lane."""
    return lanes_dir() / (hashlib.sha256(owner.encode()).hexdigest()[:24] + ".json")


def lane_url(owner: str) -> str | None:
    """The address of ``owner``'s lane on this host, or None if it has none."""
    try:
        data = json.loads(lane_file(owner).read_text())
    except (OSError, ValueError):
        return None
    url = data.get("url") if isinstance(data, dict) else None
    return url if isinstance(url, str) and data.get("owner") == owner else None


class TokenLane:
    """An engine observer serving streamed text to watchers (see the module doc)."""

    def __init__(self, owner: str, then: Observer = no_observer) -> None:
        self.owner = owner
        self._then = then
        self._watchers: dict[str, list[queue.Queue[dict[str, Any]]]] = {}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="cairn-lane", daemon=True
        )
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> TokenLane:
        self._thread.start()
        path = lane_file(self.owner)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps({"owner": self.owner, "url": self.url, "pid": os.getpid()}))
        temporary.replace(path)  # whole, or not there yet
        return self

    def close(self) -> None:
        lane_file(self.owner).unlink(missing_ok=True)
        self._server.shutdown()
        self._server.server_close()

    def __call__(self, event: Event) -> None:
        """The observer: pass the event on, and hand what watchers see to theirs."""
        if self._then is not no_observer:
            notify(self._then, event)
        shown = _shown(event)
        if shown is None or event.task_id is None:
            return
        with self._lock:
            watchers = list(self._watchers.get(event.task_id, ()))
        for watcher in watchers:
            # A slow watcher loses pieces; the agent never waits for it.
            with contextlib.suppress(queue.Full):
                watcher.put_nowait(shown)

    def watching(self, task_id: str) -> int:
        """How many watchers ``task_id`` has now."""
        with self._lock:
            return len(self._watchers.get(task_id, ()))

    def watch(self, task_id: str) -> Iterator[dict[str, Any]]:
        """What the lane shows of ``task_id`` from now on, as it comes."""
        mine: queue.Queue[dict[str, Any]] = queue.Queue(BACKLOG)
        with self._lock:
            self._watchers.setdefault(task_id, []).append(mine)
        try:
            while True:
                try:
                    yield mine.get(timeout=15)
                except queue.Empty:
                    yield {}  # a keep-alive, so a dead watcher is noticed
        finally:
            with self._lock:
                self._watchers[task_id].remove(mine)


def _shown(event: Event) -> dict[str, Any] | None:
    if event.point == "call_chunk":
        return {"text": str(event.value)}
    if event.kind == "llm" and event.point == "call_started":
        return {"call": event.name}
    if event.kind == "llm" and event.point == "call_returned":
        return {"done": event.name}
    if event.point == "task_ended":
        return {"ended": event.status}
    return None


def _handler(lane: TokenLane) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            prefix = "/tail/"
            if not self.path.startswith(prefix):
                self.send_error(404, "GET /tail/TASK_ID")
                return
            task_id = unquote(self.path[len(prefix) :])
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            try:
                for shown in lane.watch(task_id):
                    data = ": alive\n\n" if not shown else f"data: {json.dumps(shown)}\n\n"
                    self.wfile.write(data.encode())
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                return  # the watcher went away

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
            return

    return Handler


def serve_lane(app: Cairn) -> TokenLane:
    """Start ``app``'s lane (its observer, chained before the one it had);
    ``close()`` it when done."""
    lane = TokenLane(app.owner, app.observer).start()
    app.observer = lane
    return lane


def tail(url: str, task_id: str, *, timeout: float = 60.0) -> Iterator[dict[str, Any]]:
    """What the lane at ``url`` shows of ``task_id``, as it comes (keep-alives
    left out), up to the end of the task's run there (its ``ended`` event)."""
    with urlopen(f"{url}/tail/{quote(task_id, safe='')}", timeout=timeout) as stream:  # noqa: S310 - our own lane's http URL
        for raw in stream:
            line = raw.decode().rstrip("\n")
            if line.startswith("data: "):
                shown = json.loads(line[len("data: ") :])
                yield shown
                if "ended" in shown:
                    return
