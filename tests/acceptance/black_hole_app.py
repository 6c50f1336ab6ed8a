"""The app ``cairn worker`` runs in the black-hole test (test_postgres_black_hole.py).

``cairn worker tests.acceptance.black_hole_app:app --store URL`` runs task
``call_steps``: steps ``s1``..``s6``. Each step is one HTTP call,
``POST {CAIRN_TEST_API_URL}/step/<task id>/<step>/<pid>/<call id>`` (the task
id URL-quoted; the call id new for every call), to a server in the test
process that holds each answer for a while: that is the step's work. The step
returns ``<step>@<pid>#<call id>``, so the recorded result names the very call
it came from, and the server's log of every call as it arrived says whether a
step ran again after the call whose result was recorded.

The lease is cairn's default (30 s), unless ``CAIRN_TEST_LEASE`` gives another
in seconds: the test is about what a default deployment does when the path to
its database goes silent, and about a hole several leases long.
"""

from __future__ import annotations

import os
import urllib.request
import uuid
from urllib.parse import quote

from cairn import Cairn, Context, TaskDef
from cairn.engine.owners import DEFAULT_LEASE_SECONDS
from cairn.retry import NO_RETRY

STEPS = ("s1", "s2", "s3", "s4", "s5", "s6")
TASK_NAME = "call_steps"
CALL_TIMEOUT_SECONDS = 120


def call(task_id: str, step: str) -> str:
    """The step's work: one call to the test's server; returns which call it was."""
    call_id = uuid.uuid4().hex
    path = f"/step/{quote(task_id, safe='')}/{step}/{os.getpid()}/{call_id}"
    request = urllib.request.Request(  # noqa: S310 - a local URL
        os.environ["CAIRN_TEST_API_URL"] + path, data=b"{}", method="POST"
    )
    with urllib.request.urlopen(request, timeout=CALL_TIMEOUT_SECONDS) as answer:  # noqa: S310
        answer.read()
    return f"{step}@{os.getpid()}#{call_id}"


def call_steps(ctx: Context, n: int) -> list[str]:
    """The task: six checkpointed steps, each one call to the outside server."""
    return [ctx.step(step, call, ctx.task_id, step) for step in STEPS]


def make_app(store: str | None = None) -> tuple[Cairn, TaskDef[[int], list[str]]]:
    """A new app with ``call_steps`` registered, with the lease the test asks for."""
    # No task retries: these steps never fail, so a failure is the store's.
    lease = float(os.environ.get("CAIRN_TEST_LEASE") or DEFAULT_LEASE_SECONDS)
    created = Cairn(store, lease=lease, poll_interval=0.1, task_retry=NO_RETRY)
    return created, created.task(name=TASK_NAME)(call_steps)


app, task = make_app()
