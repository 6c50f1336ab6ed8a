"""The meter of a model call (``cairn.engine.meter``): what it needs before it
is sent, what it used after, and the token limit it counts against.

Before: the prompt's tokens, counted exactly as the conversation counts them
(the provider's tokenizer where cairn has it, ``cairn.agent.tokens``), its
tool schemas, plus the call's ``max_tokens`` (or ``max_completion_tokens``;
without either, the limit's ``output``, else ``DEFAULT_OUTPUT``), and that
worst case's price. After: the usage and the cost the call recorded, and
the room the provider's answer said it has left (``room``: the call's
``Completion.room``, ``cairn.agent.rate_headers``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cairn.agent.messages import Message
from cairn.agent.pricing import PriceTable, Usage
from cairn.agent.rate_headers import ProviderRoom
from cairn.agent.tokens import TokenCounter, count_messages, counter_for
from cairn.budgets import usd_to_nanos
from cairn.engine.budgets import scopes_of
from cairn.engine.meter import Meter
from cairn.engine.meter import Usage as Metered
from cairn.errors import Permanent

if TYPE_CHECKING:
    from cairn.engine.run import TaskRun

# Tokens reserved for a reply when the call sets no max_tokens and no limit says.
DEFAULT_OUTPUT = 1024
_OUTPUT_PARAMS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def max_output(params: Mapping[str, Any], default: int) -> int:
    """The reply's cap the call asks for, else ``default``."""
    for name in _OUTPUT_PARAMS:
        value = params.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return default


def prompt_tokens(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    counter: TokenCounter,
) -> int:
    """A prompt's tokens: its messages, and its tool schemas as JSON text."""
    schemas = sum(counter.count(json.dumps(tool)) for tool in tools or ())
    return count_messages(messages, counter) + schemas


def meter_for(
    run: TaskRun,
    *,
    provider: str,
    model: str,
    tools: Sequence[Mapping[str, Any]] | None,
    params: Mapping[str, Any],
    prices: PriceTable,
    counter: TokenCounter,
    messages: Callable[[], list[Message] | None],
    limit: str | None,
    room: Callable[[], ProviderRoom | None] | None = None,
) -> Meter | None:
    """The call's meter, or None when no token limit and no budget applies to it.
    ``messages`` gives the prompt right before a try (None: nothing is sent);
    ``room`` what the provider's answer to the last try said is left."""
    rate = run.limits.for_model(provider, model, limit)
    if rate is None and not scopes_of(run):
        return None
    output = max_output(params, DEFAULT_OUTPUT if rate is None else rate[1].output)

    def need() -> Metered | None:
        prompt = messages()
        if prompt is None:
            return None
        tokens = prompt_tokens(prompt, tools, counter)
        cost = prices.cost(model, Usage(tokens, output))
        if cost is None and scopes_of(run) and run.budget_in_usd:
            raise Permanent(
                f"model {model!r} has no price, and this call counts against a budget "
                "in dollars: pass prices=PriceTable({...}) (cairn.agent.pricing) with its price"
            )
        return Metered(tokens + output, usd_to_nanos(cost or 0.0))

    def used(value: Any) -> Metered:
        usage = Usage.from_dict(value.get("usage") if isinstance(value, Mapping) else None)
        cost = value.get("cost") if isinstance(value, Mapping) else None
        tokens = usage.input_tokens + usage.output_tokens
        return Metered(tokens, usd_to_nanos(float(cost or 0.0)))

    def provider_wait(tokens: int) -> float | None:
        said = None if room is None else room()
        return None if said is None else said.wait_for(tokens)

    return Meter(need, used, rate, provider_wait)


def framework_meter(
    run: TaskRun,
    *,
    provider: str,
    model: str,
    prices: PriceTable,
    prompt: Callable[[], object],
    max_tokens: object,
) -> Meter | None:
    """The meter of a model call an agent framework makes (the integrations):
    its input is the framework's own objects, so what it reserves is their
    JSON text counted with the model's counter, an estimate above the prompt
    the provider sees rather than its exact count."""
    counter = counter_for(model)

    def messages() -> list[Message]:
        text = json.dumps(prompt(), default=str, ensure_ascii=False)
        return [{"role": "user", "content": text}]

    params = {"max_tokens": max_tokens} if isinstance(max_tokens, int) else {}
    return meter_for(
        run,
        provider=provider,
        model=model,
        tools=None,
        params=params,
        prices=prices,
        counter=counter,
        messages=messages,
        limit=None,
    )
