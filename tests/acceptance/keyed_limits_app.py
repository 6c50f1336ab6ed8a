"""The app ``cairn worker`` processes run in the keyed-limit acceptance test
(test_keyed_limits_workers.py).

``cairn worker tests.acceptance.keyed_limits_app:app --store URL`` runs task
``tenant_call``: a first step, under no limit, that appends ``tenant n`` to the
file ``CAIRN_TEST_STARTED`` (the order tasks began to run in, which with one task
at a time per worker is the order they were claimed in, give or take the other
workers' one each), then one step that POSTs ``/TENANT/N`` to the server at
``CAIRN_TEST_API_URL`` under ``Concurrency(2, key="tenant")``.
"""

from __future__ import annotations

import os

from cairn import Cairn, Concurrency, Context, TaskDef
from cairn.retry import NO_RETRY
from tests.tenant_server import call_tenant

PER_TENANT = 2


def note_start(tenant: str, n: int) -> None:
    fd = os.open(os.environ["CAIRN_TEST_STARTED"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{tenant} {n}\n".encode())
    finally:
        os.close(fd)


def tenant_call(ctx: Context, tenant: str, n: int) -> int:
    ctx.step("started", note_start, tenant, n)
    return ctx.step("call", call_tenant, os.environ["CAIRN_TEST_API_URL"], tenant, n, limit="api")


def make_app(store: str | None = None) -> tuple[Cairn, TaskDef[[str, int], int]]:
    """A new app with the task registered (the test enqueues through its own)."""
    created = Cairn(
        store,
        poll_interval=0.1,
        task_retry=NO_RETRY,
        limits={"api": Concurrency(PER_TENANT, key="tenant")},
    )
    return created, created.task(tenant_call)


app, _ = make_app()
