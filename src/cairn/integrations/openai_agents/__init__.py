"""Durable agents in the OpenAI Agents SDK (``pip install 'cairn-durable[openai-agents]'``).

Inside a cairn task::

    from cairn.integrations.openai_agents import CairnSession, once_tool, run

    @app.task
    async def research(ctx: Context, topic: str) -> str:
        session = CairnSession("main", ctx=ctx)
        result = await run(ctx, agent, f"Research {topic}.", session=session)
        return str(result.final_output)

``run`` is ``Runner.run`` with every model call and every function tool call
a recorded entry of the task (``_runner``), ``run_streamed`` the same for
``Runner.run_streamed`` (``_streamed``); ``once_tool`` marks a tool whose
calls go through ``ctx.once`` (``operation_key()`` is its key, inside it);
``CairnSession`` is the SDK's ``Session`` on a cairn conversation, inside a
task or on its own (``_session``), whose compacted context each model call of a
run sends with ``compact_in_run=True`` (``_compacting``). A run resumed with another agent
definition raises ``AgentDefinitionChanged`` (``_fingerprint``). See
docs/agents-sdk.md.
"""

from __future__ import annotations

try:
    import agents  # noqa: F401 - the extra's check, before anything else is imported
except ImportError as exc:  # pragma: no cover - the test extra installs it
    from cairn.errors import ConfigurationError

    raise ConfigurationError(
        "cairn.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'cairn-durable[openai-agents]'"
    ) from exc

from cairn.errors import AgentDefinitionChanged
from cairn.integrations.openai_agents._fingerprint import fingerprint
from cairn.integrations.openai_agents._model import RecordedModel, RecordedProvider
from cairn.integrations.openai_agents._runner import run, run_streamed, run_sync
from cairn.integrations.openai_agents._session import CairnSession
from cairn.integrations.openai_agents._standalone import SESSION_TASK
from cairn.integrations.openai_agents._tools import once_tool, operation_key

__all__ = [
    "SESSION_TASK",
    "AgentDefinitionChanged",
    "CairnSession",
    "RecordedModel",
    "RecordedProvider",
    "fingerprint",
    "once_tool",
    "operation_key",
    "run",
    "run_streamed",
    "run_sync",
]
