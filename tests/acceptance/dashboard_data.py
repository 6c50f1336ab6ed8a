"""A store with one of everything the dashboard shows, made by running real tasks.

Batch ``reviews-2026-05-24``: completed, failed (a ValueError with a traceback),
one that crashed while its step was retrying, two waiting on ``ctx.wait_for``,
one whose ``ctx.once`` key is left in doubt, a ``ctx.map``, a ``ctx.spawn``
with its child, and a large value kept in the blob store. Plus an agent task
whose conversation was compacted, talking to the tests' OpenAI-compatible
server, and an internal ``cairn.`` task the listings hide.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cairn import Cairn, Context, Retry, TaskFailed, TaskWaiting
from cairn.clock import FakeClock
from cairn.store.records import NewTask
from cairn.testing import set_fault_hook
from tests.agent_server import DocReader, model_server, openai_client, reader_task
from tests.crashes import Crash

BATCH = "reviews-2026-05-24"
LONE = "\ud800"  # a lone surrogate: a result that can never be recorded


@dataclass(frozen=True)
class Ids:
    failed: str = f"{BATCH}/kind=fail"
    completed: str = f"{BATCH}/kind=ok"
    retrying: str = "retrying/1"
    waiting: str = "approve/1"
    waiting_too: str = "approve/2"
    in_doubt: str = "charge/1"
    mapped: str = "fanout/1"
    parent: str = "parent/1"
    blob: str = "big/1"
    agent: str = "agent/1"
    internal: str = "cairn.report/1"


IDS = Ids()


def _review(app: Cairn, clock: FakeClock) -> None:
    @app.task(name="review")
    def review(ctx: Context, kind: str) -> dict[str, Any]:
        def fetch() -> str:
            clock.advance(2.5)  # the fake clock: a step that takes time
            return f"invoice {kind}"

        def check() -> dict[str, Any]:
            clock.advance(1.2)
            if kind == "fail":
                raise ValueError("the <b>invoice</b> total\ndoes not match its lines")
            return {"kind": kind, "lines": [{"sku": f"A-{i}", "qty": i} for i in range(4)]}

        ctx.step("fetch", fetch)
        result = dict(ctx.step("check", check))
        ctx.once(f"notify/{kind}", lambda key: key)
        return result

    app.run_batch(BATCH, review, [{"kind": "ok"}, {"kind": "fail"}], progress=False)


def _retrying(app: Cairn) -> None:
    """A step that failed once and was to be tried again when the process died."""

    def flaky() -> str:
        raise ConnectionError("upstream reset the connection")

    @app.task(name="flaky")
    def flaky_task(ctx: Context) -> str:
        return str(ctx.step("call upstream", flaky, retry=Retry(attempts=5, jitter=0)))

    calls: list[int] = []

    def hook(point: str, task_id: str, seq: int, name: str) -> None:
        if point == "before_step" and name == "call upstream":
            calls.append(seq)
            if len(calls) == 2:
                raise Crash("killed while retrying")

    set_fault_hook(app, hook)
    with pytest.raises(Crash):
        app.run(flaky_task, task_id=IDS.retrying)
    set_fault_hook(app, lambda *args: None)


def _waiting_and_doubt(app: Cairn) -> None:
    @app.task(name="approve")
    def approve(ctx: Context, amount: int) -> str:
        ctx.step("prepare", lambda: amount * 2)
        return str(ctx.wait_for("approval").payload)

    for task_id in (IDS.waiting, IDS.waiting_too):
        with pytest.raises(TaskWaiting):
            app.run(approve, task_id=task_id, amount=12)

    @app.task(name="charge")
    def charge(ctx: Context) -> Any:
        return ctx.once("charge/card-4242", lambda key: "charged" + LONE)

    with pytest.raises(TaskFailed):
        app.run(charge, task_id=IDS.in_doubt)


def _fanout_and_children(app: Cairn, clock: FakeClock) -> None:
    def square(n: int) -> int:
        clock.advance(0.3 + n / 10)
        return n * n

    @app.task(name="child")
    def child(ctx: Context, n: int) -> int:
        return int(ctx.step("square", square, n))

    @app.task(name="parent")
    def parent(ctx: Context) -> int:
        squares = ctx.map(square, range(6), name="square")
        kid = ctx.spawn(child, key="seven", n=7)
        (seven,) = ctx.join(kid)
        return int(sum(squares)) + int(seven)

    app.run(parent, task_id=IDS.parent)

    @app.task(name="fanout")
    def fanout(ctx: Context) -> list[int]:
        return list(ctx.map(square, range(12), name="page"))

    app.run(fanout, task_id=IDS.mapped)

    @app.task(name="big")
    def big(ctx: Context) -> str:
        return str(ctx.step("download", lambda: "x" * 5000)[:10])

    app.run(big, task_id=IDS.blob)


def _agent(app: Cairn) -> None:
    with model_server(DocReader(docs=6)) as server:
        task = reader_task(app, openai_client(server), threshold=600, keep_tail=200)
        app.run(task, task_id=IDS.agent, goal="Read doc-00 to doc-05 and sum the costs.")


def build(tmp_path: Path, clock: FakeClock) -> Cairn:
    """The app whose store holds all of the above (blobs over 1000 bytes go to files)."""
    app = Cairn(
        f"sqlite:///{tmp_path / 'dash.db'}",
        clock=clock,
        blobs=str(tmp_path / "blobs"),
        inline_limit=1000,
    )
    _review(app, clock)
    _retrying(app)
    _waiting_and_doubt(app)
    _fanout_and_children(app, clock)
    _agent(app)
    app.store.create_task(NewTask(IDS.internal, "cairn.report", "{}", "json"), clock.now())
    clock.advance(60)
    return app
