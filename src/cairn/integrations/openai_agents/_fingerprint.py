"""The fingerprint of an agent definition, recorded at the start of a run.

A task resumed with other instructions, tools, model or handoffs than it started
with would replay its record into a different agent: the recorded responses
would answer requests the new agent never sends. So ``run()`` records what the
agents it can reach are (text fields as short hashes, names as they are) and,
on resume, compares: a difference raises ``AgentDefinitionChanged`` naming each
change, before anything is sent or written.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, is_dataclass
from typing import Any

from agents import Agent, FunctionTool, Handoff, Model

from cairn.integrations.openai_agents._model import model_name

Fingerprint = dict[str, dict[str, Any]]


def _digest(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _instructions(agent: Agent[Any]) -> str | None:
    value = agent.instructions
    if value is None:
        return None
    if isinstance(value, str):
        return _digest(value)
    return f"function {getattr(value, '__qualname__', repr(value))}"


def _tool(tool: Any) -> str:
    if isinstance(tool, FunctionTool):
        return _digest([tool.description, tool.params_json_schema])
    return type(tool).__name__


def _settings(agent: Agent[Any]) -> str:
    settings = agent.model_settings
    return _digest(asdict(settings) if is_dataclass(settings) else repr(settings))


def _handoff_name(handoff: Agent[Any] | Handoff[Any, Any]) -> str:
    return handoff.name if isinstance(handoff, Agent) else handoff.agent_name


def describe_agent(agent: Agent[Any]) -> dict[str, Any]:
    """What one agent is, as the fingerprint keeps it."""
    model = agent.model
    return {
        "instructions": _instructions(agent),
        "model": model_name(model) if isinstance(model, (Model, str)) else None,
        "model_settings": _settings(agent),
        "tools": {tool.name: _tool(tool) for tool in agent.tools},
        "handoffs": sorted(_handoff_name(h) for h in agent.handoffs),
        "output_type": None if agent.output_type is None else repr(agent.output_type),
    }


def fingerprint(agent: Agent[Any]) -> Fingerprint:
    """Every agent reachable from ``agent`` through its handoffs, by name."""
    found: Fingerprint = {}
    pending = [agent]
    while pending:
        current = pending.pop()
        if current.name in found:
            continue
        found[current.name] = describe_agent(current)
        pending.extend(h for h in current.handoffs if isinstance(h, Agent))
    return found


def changes(recorded: Fingerprint, current: Fingerprint) -> list[str]:
    """What differs between two fingerprints, one phrase each."""
    found: list[str] = []
    for name in sorted(recorded.keys() - current.keys()):
        found.append(f"agent {name!r} is gone")
    for name in sorted(current.keys() - recorded.keys()):
        found.append(f"agent {name!r} is new")
    for name in sorted(recorded.keys() & current.keys()):
        before, after = recorded[name], current[name]
        for part in sorted(before.keys() | after.keys()):
            if part == "tools":
                found.extend(_tool_changes(name, before.get(part, {}), after.get(part, {})))
            elif before.get(part) != after.get(part):
                found.append(
                    f"agent {name!r}: {part.replace('_', ' ')} {_shown(part, before.get(part))} "
                    f"-> {_shown(part, after.get(part))}"
                )
    return found


def _shown(part: str, value: Any) -> str:
    if part in ("instructions", "model_settings") and isinstance(value, str):
        return f"(sha256 {value})" if not value.startswith("function ") else value
    return repr(value)


def _tool_changes(agent: str, before: dict[str, str], after: dict[str, str]) -> list[str]:
    found = [f"agent {agent!r}: tool {t!r} removed" for t in sorted(before.keys() - after.keys())]
    found += [f"agent {agent!r}: tool {t!r} added" for t in sorted(after.keys() - before.keys())]
    found += [
        f"agent {agent!r}: tool {t!r} changed (description or parameters)"
        for t in sorted(before.keys() & after.keys())
        if before[t] != after[t]
    ]
    return found
