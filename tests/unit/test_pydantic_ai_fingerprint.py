"""The fingerprint of a Pydantic AI agent's definition, and the tool options' checks."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.models import Model
from pydantic_ai.models.test import TestModel

from cairn.errors import ConfigurationError
from cairn.integrations.pydantic_ai import CairnDurability, fingerprint
from cairn.integrations.pydantic_ai._backend import _on_doubt, _reconcile_for
from cairn.integrations.pydantic_ai._fingerprint import changes


def researcher(model: str | Model = "test", **options: Any) -> Agent[None, str]:
    """A fresh agent with one tool and a function instruction (built anew each
    call, as a restarted process builds it)."""
    agent = Agent(model, name="researcher", instructions="Read.", **options)

    @agent.tool_plain
    def read(name: str) -> str:
        """Read one document."""
        return name

    @agent.instructions
    def today(ctx: RunContext[None]) -> str:
        return "today"

    return agent


def test_the_same_definition_built_twice_has_the_same_fingerprint() -> None:
    """Two agents built by the same code (new functions, new memory addresses)
    have equal fingerprints: nothing in it depends on the process."""
    assert fingerprint(researcher()) == fingerprint(researcher())
    assert changes(fingerprint(researcher()), fingerprint(researcher())) == []


def test_each_change_is_named() -> None:
    """A tool added, a model changed, other instructions and another output type
    each come out as a phrase naming what changed."""
    before = fingerprint(researcher())
    other = researcher(TestModel(model_name="gpt-4o"), output_type=int)

    @other.tool_plain
    def erase(name: str) -> str:
        """Erase one document."""
        return name

    found = changes(before, fingerprint(other))
    assert "tool 'erase' added" in found
    assert "model 'test' -> 'gpt-4o'" in found
    assert any(phrase.startswith("output type") for phrase in found)
    plain = Agent("test", name="researcher", instructions="Write.")
    assert "instructions changed" in changes(before, fingerprint(plain))


def test_a_changed_tool_signature_is_named() -> None:
    """A tool whose parameters changed (same name) is named as changed."""
    before = fingerprint(researcher())
    agent = Agent("test", name="researcher", instructions="Read.")

    @agent.tool_plain
    def read(name: str, page: int) -> str:
        """Read one document."""
        return name

    assert "tool 'read' changed (description or parameters)" in changes(before, fingerprint(agent))


def test_bad_tool_options_are_refused_naming_what_they_take() -> None:
    """on_doubt is 'raise' or 'retry'; reconcile is a function; outside_task is
    'raise' or 'run': anything else is a ConfigurationError saying so."""
    assert _on_doubt({}) == "raise"
    assert _on_doubt({"on_doubt": "retry"}) == "retry"
    with pytest.raises(ConfigurationError, match="'raise' or 'retry'"):
        _on_doubt({"on_doubt": "later"})
    with pytest.raises(ConfigurationError, match="function of the operation key"):
        _reconcile_for({"reconcile": "ledger"})
    assert _reconcile_for({}) is None
    with pytest.raises(ConfigurationError, match="'raise' or 'run'"):
        CairnDurability(outside_task="skip")  # type: ignore[arg-type]
