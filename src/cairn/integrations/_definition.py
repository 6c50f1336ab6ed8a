"""An agent definition recorded as a run starts, and compared on every resume.

The agent integrations (``openai_agents``, ``pydantic_ai``) record what the
agent is (its fingerprint, a JSON value each integration computes) as a
recorded input at the run's first position. A task resumed with another
definition would replay its record into a different agent, so a difference
raises ``AgentDefinitionChanged`` naming each change, before anything is sent
or written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cairn.context import Context
from cairn.engine.steps import EntryLabel, record_completed
from cairn.errors import AgentDefinitionChanged

Changes = Callable[[Any, Any], list[str]]


def check_definition(
    ctx: Context, name: str, current: Any, changes: Changes, framework: str
) -> None:
    """Record ``current`` as the entry ``name`` at the next position (a recorded
    input, written as it is: there is no function to call), or compare it with
    the one recorded there; ``changes(recorded, current)`` names what differs."""
    run = ctx._run
    seq = run.next_seq()
    what = EntryLabel("input", name, seq)
    entry = run.replayed(seq, "input", name)
    if entry is None:
        record_completed(run, seq, "input", name, run.encode(current, what), run.now())
        return
    recorded = run.decode(entry.output or "null", what)
    if recorded != current:
        found = changes(recorded, current) or ["the fingerprint differs"]
        error = AgentDefinitionChanged(
            task_id=ctx.task_id, seq=seq, changes=found, framework=framework
        )
        run.poisoned = error  # an agent's `except Exception:` cannot carry on past it
        raise error
