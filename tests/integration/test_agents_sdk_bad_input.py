"""Bad input to the Agents SDK integration: a clear error saying what was wrong
and what to do, and nothing recorded lost.

A session on something that is not a cairn store; a run resumed with another
agent definition than it started with (instructions, tools, model), which is
refused before anything is sent, naming each change, and which the original
definition then finishes.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, SQLiteSession, function_tool

from cairn import Cairn, Context, TaskDef, TaskFailed
from cairn.agent.simulate import SimulatedModelServer
from cairn.clock import FakeClock
from cairn.errors import ConfigurationError, NotACairnStore
from cairn.integrations.openai_agents import CairnSession, run
from cairn.integrations.openai_agents._fingerprint import changes, fingerprint
from cairn.store import admin
from cairn.testing import set_fault_hook
from tests.agent_server import Crash, Scripted, crash_at, resume
from tests.agents_sdk import sdk_model, tool_call

ANSWER = "Both noted."


def test_a_session_on_an_sdk_session_says_what_store_takes(tmp_path: Path) -> None:
    """store= given another framework's session is refused, naming what it takes."""
    other = SQLiteSession("s", str(tmp_path / "sdk.db"))
    with pytest.raises(ConfigurationError) as refused:
        CairnSession("s", store=other)
    message = str(refused.value)
    assert "SQLiteSession" in message
    assert "cairn store URL" in message
    assert "ctx=" in message


def test_a_session_on_a_database_that_is_not_cairns_is_refused(tmp_path: Path) -> None:
    """A SQLite file of someone else's (here the SDK's own session database) is
    not taken over: NotACairnStore at once, and the file is left as it was."""
    path = tmp_path / "theirs.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE agent_messages (id INTEGER PRIMARY KEY, body TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(NotACairnStore) as refused:
        CairnSession("s", store=f"sqlite:///{path}")
    assert str(path) in str(refused.value)
    conn = sqlite3.connect(path)
    tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    conn.close()
    assert tables == ["agent_messages"]


def test_ctx_and_store_together_are_refused(app: Cairn) -> None:
    """A session is in a task (ctx=) or on its own (store=), never both."""

    @app.task
    async def both(ctx: Context) -> None:
        CairnSession("s", ctx=ctx, store=app.store)

    with app, pytest.raises(TaskFailed) as failed:
        app.run(both, task_id="both")
    assert "not both" in failed.value.error["message"]


def test_a_session_id_of_another_task_is_refused(app: Cairn) -> None:
    """A session id that is the id of an ordinary task in the store is refused,
    and that task's record is untouched."""

    @app.task
    def plain(ctx: Context) -> int:
        return 1

    async def use() -> None:
        await CairnSession("job-1", store=app).get_items()

    with app:
        app.run(plain, task_id="job-1")
        with pytest.raises(ConfigurationError) as refused:
            asyncio.run(use())
        record = app.store.get_task("job-1")
    assert "task of 'plain'" in str(refused.value)
    assert record is not None
    assert record.status == "completed"


# -- a run resumed with another agent definition ------------------------------------------
@function_tool
def note(n: int) -> str:
    """Note a number."""
    return f"noted {n}"


@function_tool
def erase(n: int) -> str:
    """Erase a number."""
    return f"erased {n}"


def agent_of(base_model: Any, **changed: Any) -> Agent[Any]:
    options: dict[str, Any] = {
        "name": "noter",
        "instructions": "Note the numbers.",
        "model": base_model,
        "tools": [note],
    }
    return Agent(**{**options, **changed})


def task_of(app: Cairn, agent: list[Agent[Any]]) -> TaskDef[..., Any]:
    """The task, running whichever agent ``agent`` holds when it runs."""

    @app.task(name="agent")
    async def agent_task(ctx: Context) -> str:
        result = await run(ctx, agent[0], "note 0 and 1")
        return str(result.final_output)

    return agent_task


def script() -> Scripted:
    calls = [tool_call(f"call_{n}", "note", json.dumps({"n": n})) for n in range(2)]
    return Scripted([*calls, ANSWER])


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"instructions": "Erase the numbers."}, "agent 'noter': instructions"),
        ({"tools": [note, erase]}, "agent 'noter': tool 'erase' added"),
        ({"model": "gpt-4o"}, "agent 'noter': model 'gpt-4o-mini' -> 'gpt-4o'"),
    ],
    ids=["instructions", "tools", "model"],
)
def test_a_resume_with_another_definition_is_refused_and_nothing_is_lost(
    db_path: Path, clock: FakeClock, change: dict[str, Any], named: str
) -> None:
    """Crashed mid-run and resumed with changed instructions, tools or model, the
    task fails with AgentDefinitionChanged naming the change and what to do,
    before any request; its record is as it was, and retried with the original
    definition it finishes without sending a recorded request again."""
    url = f"sqlite:///{db_path}"
    with SimulatedModelServer(script()) as server:
        model = sdk_model(server)
        app = Cairn(url, clock=clock)
        set_fault_hook(app, crash_at("after_llm", 2))
        with pytest.raises(Crash), app:
            app.run(task_of(app, [agent_of(model)]), task_id="t")
        with resume(url, clock) as other:
            agent = [agent_of(model, **change)]
            resumed = task_of(other, agent)
            before = other.store.load_history("t")
            with pytest.raises(TaskFailed) as failed:
                other.run(resumed, task_id="t")
            after = {seq: s for seq, s in other.store.load_history("t").items() if seq in before}
            assert after == before
            assert server.requests == 2
            assert admin(other.store).retry_task("t", clock.now())
            agent[0] = agent_of(model)
            assert other.run(resumed, task_id="t") == ANSWER
        assert (server.requests, server.repeats) == (3, 0)
    error = failed.value.error
    assert error["type"] == "cairn.errors.AgentDefinitionChanged"
    assert named in error["message"]
    assert "restore that definition" in error["message"]
    assert "Nothing recorded was changed" in error["message"]


def test_the_fingerprint_follows_handoffs_and_names_agents_gone_and_new() -> None:
    """An agent reachable by a handoff is part of the definition: one removed or
    added is named, and an unchanged definition has no changes."""
    helper = Agent(name="helper", instructions="Help.")
    lead = Agent(name="lead", instructions="Lead.", handoffs=[helper])
    alone = Agent(name="lead", instructions="Lead.")
    assert set(fingerprint(lead)) == {"lead", "helper"}
    assert changes(fingerprint(lead), fingerprint(lead)) == []
    found = changes(fingerprint(lead), fingerprint(alone))
    assert "agent 'helper' is gone" in found
    assert "agent 'lead': handoffs ['helper'] -> []" in found


def test_a_run_config_model_is_part_of_the_definition(db_path: Path, clock: FakeClock) -> None:
    """A model forced by the run config counts: resumed with another one, the
    run is refused naming it, before any request."""
    url = f"sqlite:///{db_path}"
    with SimulatedModelServer(script()) as server:
        forced = [RunConfig(model=sdk_model(server))]

        def forcing(app: Cairn) -> TaskDef[..., Any]:
            @app.task(name="forcing")
            async def forcing_task(ctx: Context) -> str:
                agent = agent_of("gpt-4o-mini")
                result = await run(ctx, agent, "note", run_config=forced[0], max_turns=1)
                return str(result.final_output)

            return forcing_task

        app = Cairn(url, clock=clock)
        set_fault_hook(app, crash_at("after_llm", 1))
        with pytest.raises(Crash), app:
            app.run(forcing(app), task_id="f")
        forced[0] = RunConfig(model="gpt-4o")
        with resume(url, clock) as other, pytest.raises(TaskFailed) as failed:
            other.run(forcing(other), task_id="f")
        assert server.requests == 1
    assert "'(run config)': model 'gpt-4o-mini' -> 'gpt-4o'" in failed.value.error["message"]


def test_run_outside_a_task_says_to_call_it_inside_one() -> None:
    """run() given something other than a task's ctx says what it needs."""
    with pytest.raises(TypeError, match="inside a cairn task"):
        asyncio.run(run(None, Agent(name="a"), "hi"))  # type: ignore[arg-type]


def test_a_session_whose_task_was_cancelled_says_so(app: Cairn) -> None:
    """An operator cancelled the session's task: the next call says the session
    takes no more writes and how to read it, and its rows stay."""

    async def add(text: str) -> None:
        await CairnSession("chat", store=app).add_items([{"role": "user", "content": text}])

    with app:
        asyncio.run(add("one"))
        assert admin(app.store).cancel_task("chat", app.clock.now())
        with pytest.raises(ConfigurationError) as refused:
            asyncio.run(add("two"))
        rows = app.store.load_messages("chat", "session", 0, 10)
    assert "is cancelled" in str(refused.value)
    assert "cairn conversation chat" in str(refused.value)
    assert len(rows) == 1
