"""The app ``cairn worker`` runs in the PostgreSQL outage test (test_postgres_outage.py).

``cairn worker tests.acceptance.outage_app:app --store URL`` runs task
``call_steps``: steps ``s1``..``s6``. Each step is one HTTP call,
``POST {CAIRN_TEST_API_URL}/step/<task id>/<step>/<pid>`` (the task id
URL-quoted), to a server in the test process that holds each answer for a while:
that is the step's work. The server logs every call as it arrives, so a step
that runs twice is seen there, whatever cairn recorded, and even if the worker
that made the call is killed.

The lease is cairn's default (30 s): the test is about what a default deployment
does across an outage.
"""

from __future__ import annotations

import os
import urllib.request
from urllib.parse import quote

from cairn import Cairn, Context, TaskDef
from cairn.retry import NO_RETRY

STEPS = ("s1", "s2", "s3", "s4", "s5", "s6")
TASK_NAME = "call_steps"
CALL_TIMEOUT_SECONDS = 120


def call(task_id: str, step: str) -> str:
    """The step's work: one call to the test's server; returns who made it."""
    url = f"{os.environ['CAIRN_TEST_API_URL']}/step/{quote(task_id, safe='')}/{step}/{os.getpid()}"
    request = urllib.request.Request(url, data=b"{}", method="POST")  # noqa: S310 - a local URL
    with urllib.request.urlopen(request, timeout=CALL_TIMEOUT_SECONDS) as answer:  # noqa: S310
        answer.read()
    return f"{step}@{os.getpid()}"


def call_steps(ctx: Context, n: int) -> list[str]:
    """The task: six checkpointed steps, each one call to the outside server."""
    return [ctx.step(step, call, ctx.task_id, step) for step in STEPS]


def make_app(store: str | None = None) -> tuple[Cairn, TaskDef[[int], list[str]]]:
    """A new app with ``call_steps`` registered; the default lease."""
    # No task retries: these steps never fail, so a failure is the store's.
    created = Cairn(store, poll_interval=0.1, task_retry=NO_RETRY)
    return created, created.task(name=TASK_NAME)(call_steps)


app, task = make_app()
