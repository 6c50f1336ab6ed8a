"""Durable Pydantic AI agents (``pip install 'cairn-durable[pydantic-ai]'``).

Inside a cairn task::

    from pydantic_ai import Agent
    from cairn.integrations.pydantic_ai import CairnDurability

    agent = Agent("openai:gpt-4o-mini", name="researcher", capabilities=[CairnDurability()])

    @app.task
    async def research(ctx: Context, topic: str) -> str:
        result = await agent.run(f"Research {topic}.")
        return result.output

``CairnDurability`` is a Pydantic AI durability capability, shaped as its
Temporal, DBOS and Prefect ones are (``_durability``): every model request is
an ``llm`` entry of the task and every tool call a step (``_backend``), so a
task killed mid-run and run again replays what was recorded and goes on live
from there. What a recorded call added to the run's usage (a delegate agent's
tokens, say) is recorded with it and added back on replay. A run resumed with
another agent definition raises ``AgentDefinitionChanged`` (``_fingerprint``).
See docs/pydantic-ai.md.
"""

from __future__ import annotations

try:
    import pydantic_ai  # noqa: F401 - the extra's check, before anything else is imported
except ImportError as exc:  # pragma: no cover - the test extra installs it
    from cairn.errors import ConfigurationError

    raise ConfigurationError(
        "cairn.integrations.pydantic_ai needs Pydantic AI: pip install 'cairn-durable[pydantic-ai]'"
    ) from exc

from cairn.errors import AgentDefinitionChanged
from cairn.integrations.pydantic_ai._backend import SCOPE, operation_key
from cairn.integrations.pydantic_ai._durability import CairnDurability
from cairn.integrations.pydantic_ai._fingerprint import fingerprint

__all__ = ["SCOPE", "AgentDefinitionChanged", "CairnDurability", "fingerprint", "operation_key"]
