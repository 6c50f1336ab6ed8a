"""run(approvals="wait"): each pending tool approval of an Agents SDK run is a
durable wait, decided by a signal (approve, reject with a message, time out).

In process, on SQLite, with the support agent of
tests/acceptance/approval_agent_app.py (whose refund needs approval) on the
simulated server; the SIGKILL proof is
tests/acceptance/test_agents_sdk_approval_sigkill.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn import Cairn, Context, TaskDef, TaskFailed, TaskWaiting
from cairn.agent.simulate import SimulatedModelServer
from cairn.clock import FakeClock
from cairn.integrations.openai_agents import run
from tests.acceptance.approval_agent_app import REFUSED, support_agent, support_model
from tests.agent_server import model_server

SIGNAL = "approve refund call_refund"


@pytest.fixture
def counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file the agent's tools count their calls in."""
    path = tmp_path / "counts"
    monkeypatch.setenv("CAIRN_TEST_COUNTS", str(path))
    return path


@pytest.fixture
def server() -> Iterator[SimulatedModelServer]:
    with model_server(support_model) as running:
        yield running


def tool_runs(counts: Path) -> Counter[str]:
    lines = counts.read_text().splitlines() if counts.exists() else []
    return Counter(line.split()[0] for line in lines)


def support_task(app: Cairn, base_url: str, **options: Any) -> TaskDef[..., Any]:
    @app.task(name="support", retry=None)
    async def support(ctx: Context) -> str:
        agent = support_agent(base_url)
        result = await run(ctx, agent, "Order o-1 arrived damaged.", **options)
        return str(result.final_output)

    return support


def test_a_rejection_tells_the_model_and_the_tool_never_runs(
    app: Cairn, server: SimulatedModelServer, counts: Path
) -> None:
    """The run stops at the wait (the task waits, naming the signal); a
    rejection with a message sends the model that message as the refund's
    output, the refund never runs, and the run ends with the model's answer."""
    task = support_task(app, server.base_url, approvals="wait")
    with pytest.raises(TaskWaiting, match=SIGNAL):
        app.run(task, task_id="s")
    assert tool_runs(counts) == Counter({"lookup": 1, "notify": 1})
    message = "refunds over 30 euros need a manager"
    assert app.signal("s", SIGNAL, {"approve": False, "message": message})
    assert app.run(task, task_id="s") == REFUSED
    assert tool_runs(counts) == Counter({"lookup": 1, "notify": 1})
    assert message in str(server.bodies[-1]["messages"])
    assert (server.requests, server.repeats) == (3, 0)


def test_no_decision_in_time_rejects(
    app: Cairn, clock: FakeClock, server: SimulatedModelServer, counts: Path
) -> None:
    """With approval_timeout, a wait that times out rejects the call, saying so."""
    task = support_task(app, server.base_url, approvals="wait", approval_timeout=3600)
    with pytest.raises(TaskWaiting):
        app.run(task, task_id="s")
    clock.advance(3601)
    assert app.run(task, task_id="s") == REFUSED
    assert "not approved within 3600 seconds" in str(server.bodies[-1]["messages"])
    assert "refund" not in tool_runs(counts)


def test_a_payload_that_is_no_decision_fails_the_task_in_one_line(
    app: Cairn, server: SimulatedModelServer, counts: Path
) -> None:
    """A signal whose payload is neither true, false nor {"approve": ...}:
    the task fails, saying what an approval looks like; the refund never runs."""
    task = support_task(app, server.base_url, approvals="wait")
    with pytest.raises(TaskWaiting):
        app.run(task, task_id="s")
    app.signal("s", SIGNAL, {"ok": True})
    with pytest.raises(TaskFailed, match=r"an approval is true, false, or"):
        app.run(task, task_id="s")
    assert "refund" not in tool_runs(counts)


def test_without_wait_the_interruptions_come_back_and_a_bad_mode_is_refused(
    app: Cairn, server: SimulatedModelServer, counts: Path
) -> None:
    """By default the SDK's interruptions come back in the result (nothing
    waits); approvals= other than 'return' or 'wait' is refused by name."""

    @app.task(name="plain", retry=None)
    async def plain(ctx: Context) -> list[str]:
        result = await run(ctx, support_agent(server.base_url), "Order o-1 arrived damaged.")
        return [item.tool_name or "" for item in result.interruptions]

    assert app.run(plain, task_id="p") == ["refund"]
    bad = support_task(app, server.base_url, approvals="later")
    with pytest.raises(TaskFailed, match="give 'return'"):
        app.run(bad, task_id="b")
