"""The fingerprint of a Pydantic AI agent's definition, recorded as a run starts.

A task resumed with other instructions, tools, model or output type than it
started with would replay its record into a different agent: the recorded
responses would answer requests the new agent never sends. So each run records
what the agent is (text as short hashes, names as they are, a function by its
qualified name) and, on resume, compares: a difference raises
``AgentDefinitionChanged`` naming each change, before anything is sent.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic_ai.agent.abstract import AbstractAgent
from pydantic_ai.models import Model
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset

from cairn.context import Context
from cairn.integrations._definition import check_definition

Fingerprint = dict[str, Any]


def _digest(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _text_or_function(value: Any) -> str:
    """A literal text as its hash; anything computed by the name of what computes it
    (never its repr, which holds a memory address that differs from run to run)."""
    inner = getattr(value, "instruction", value)  # a sourced instruction wraps its value
    if isinstance(inner, str):
        return _digest(inner)
    function = getattr(inner, "function", inner)
    name = getattr(function, "__qualname__", None)
    return f"function {name}" if name else type(inner).__name__


def model_name(model: Model | str | None) -> str:
    """The name a model goes by in the record and the price table."""
    if model is None:
        return "default"
    if isinstance(model, str):
        return model.split(":", 1)[-1]
    return model.model_name


def _tools(toolsets: Any) -> dict[str, str]:
    found: dict[str, str] = {}
    for toolset in toolsets:
        if isinstance(toolset, FunctionToolset):
            for name, tool in toolset.tools.items():
                found[name] = _digest([tool.description, tool.function_schema.json_schema])
        elif isinstance(toolset, AbstractToolset):
            found[f"({type(toolset).__name__} {toolset.id})"] = "toolset"
    return found


def fingerprint(agent: AbstractAgent[Any, Any]) -> Fingerprint:
    """What one agent is, as the record keeps it."""
    model = agent.model
    return {
        "name": agent.name,
        "model": model_name(model) if isinstance(model, (Model, str)) else None,
        "instructions": [_text_or_function(i) for i in getattr(agent, "_instructions", ())],
        "system_prompts": [_text_or_function(p) for p in getattr(agent, "_system_prompts", ())],
        "tools": _tools(agent.toolsets),
        "output_type": repr(agent.output_type),
    }


def changes(recorded: Fingerprint, current: Fingerprint) -> list[str]:
    """What differs between two fingerprints, one phrase each."""
    found: list[str] = []
    for part in sorted(recorded.keys() | current.keys()):
        before, after = recorded.get(part), current.get(part)
        if before == after:
            continue
        if part == "tools" and isinstance(before, dict) and isinstance(after, dict):
            found += [f"tool {t!r} removed" for t in sorted(before.keys() - after.keys())]
            found += [f"tool {t!r} added" for t in sorted(after.keys() - before.keys())]
            found += [
                f"tool {t!r} changed (description or parameters)"
                for t in sorted(before.keys() & after.keys())
                if before[t] != after[t]
            ]
        elif part in ("instructions", "system_prompts"):
            found.append(f"{part.replace('_', ' ')} changed")
        else:
            found.append(f"{part.replace('_', ' ')} {before!r} -> {after!r}")
    return found


def check_agent(ctx: Context, agent: AbstractAgent[Any, Any]) -> None:
    """Record the agent's fingerprint as the run's first entry, or compare it
    with the one recorded there (``AgentDefinitionChanged`` if they differ)."""
    name = f"pydantic-ai agent {agent.name}"
    check_definition(ctx, name, fingerprint(agent), changes, "Pydantic AI")
